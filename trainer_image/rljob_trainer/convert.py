"""`rljob ckpt convert`: DCP shards -> model.safetensors + config.json, no process group needed.

Reads only the model's tensors (not the optimizer), whatever the number of ranks that wrote
them, and the model config the trainer stored next to them:

- FSDP: the `model.*` tensors of `global_step_N/actor`;
- Megatron: the GPTModel tensors of `global_step_N/actor/iter_N` (dist_checkpointing's torch_dist
  format is DCP), with the layers megatron stacks in the checkpoint split again into
  `decoder.layers.<i>.*`: the state dict of the whole model on one rank.

torch is imported inside `convert`, so registering the subcommand costs the `rljob` CLI nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rljob_contract.manifest import MANIFEST_NAME

from rljob_trainer.dcp_read import ConvertError, read_dcp_tensors

MODEL_PREFIX = "model."
CONFIG_KEY = "train_state.model_config"


def _resolve_dcp_dir(dcp_path: Path) -> Path:
    """Accept `global_step_N/actor` or `global_step_N` itself (and a Megatron `iter_N`)."""
    if not (dcp_path / ".metadata").is_file() and (dcp_path / "actor").is_dir():
        dcp_path = dcp_path / "actor"
    iterations = sorted(dcp_path.glob("iter_*"))
    if not (dcp_path / ".metadata").is_file() and len(iterations) == 1:
        dcp_path = iterations[0]
    if not (dcp_path / ".metadata").is_file():
        raise ConvertError(f"{dcp_path} has no .metadata: it is not a DCP checkpoint folder")
    step_dir = dcp_path.parent.parent if dcp_path.name.startswith("iter_") else dcp_path.parent
    if step_dir.name.startswith("global_step_") and not (step_dir / MANIFEST_NAME).is_file():
        raise ConvertError(
            f"{step_dir} has no {MANIFEST_NAME}: the checkpoint was not completely written"
        )
    return dcp_path


def convert(dcp_path: str | Path, output_path: str | Path) -> Path:
    """Write `<output_path>/model.safetensors` and `config.json`; return the safetensors path."""
    source = _resolve_dcp_dir(Path(dcp_path))
    from safetensors.torch import save_file

    if source.name.startswith("iter_"):
        from rljob_trainer.megatron.convert import megatron_model

        weights, config = megatron_model(source)
    else:
        weights, config = _fsdp_model(source)
    if not weights:
        raise ConvertError(f"{source} holds no model weights")
    out = Path(output_path)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "model.safetensors"
    save_file(weights, str(target), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return target


def _fsdp_model(source: Path) -> tuple[dict, dict]:
    state = read_dcp_tensors(source, lambda key: key.startswith(MODEL_PREFIX), {CONFIG_KEY: ""})
    config = json.loads(str(state.pop(CONFIG_KEY)))
    return {key[len(MODEL_PREFIX) :]: tensor for key, tensor in state.items()}, config


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dcp_path",
        "--dcp-path",
        required=True,
        help="a checkpoint's DCP folder, global_step_N/actor (global_step_N is accepted too)",
    )
    parser.add_argument(
        "--output_path",
        "--output-path",
        required=True,
        help="folder to write model.safetensors and config.json into",
    )


def _run(args: argparse.Namespace) -> int:
    try:
        target = convert(args.dcp_path, args.output_path)
    except (ConvertError, OSError) as exc:
        print(f"convert: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {target} and {target.with_name('config.json')}")
    return 0


def register_convert(ckpt_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `convert` under `rljob ckpt`; the parser's `handler(args)` returns the exit code."""
    parser = ckpt_subparsers.add_parser(
        "convert",
        help="DCP checkpoint shards to a safetensors model + config.json",
        description=__doc__.splitlines()[0],
    )
    _add_arguments(parser)
    parser.set_defaults(handler=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rljob_trainer.convert", description=__doc__)
    _add_arguments(parser)
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
