"""`rljob ckpt convert`: DCP shards -> model.safetensors + config.json, no process group needed.

Reads only the `model.*` tensors (not the optimizer) from `global_step_N/actor`, whatever the
number of ranks that wrote them, and the model config the trainer stored next to them.
torch is imported inside `convert`, so registering the subcommand costs the `rljob` CLI nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from rljob_contract.manifest import MANIFEST_NAME

MODEL_PREFIX = "model."
CONFIG_KEY = "train_state.model_config"


class ConvertError(RuntimeError):
    """The input is not a complete trainer checkpoint."""


def _resolve_dcp_dir(dcp_path: Path) -> Path:
    """Accept `global_step_N/actor` or `global_step_N` itself."""
    if not (dcp_path / ".metadata").is_file() and (dcp_path / "actor" / ".metadata").is_file():
        dcp_path = dcp_path / "actor"
    if not (dcp_path / ".metadata").is_file():
        raise ConvertError(f"{dcp_path} has no .metadata: it is not a DCP checkpoint folder")
    step_dir = dcp_path.parent
    if step_dir.name.startswith("global_step_") and not (step_dir / MANIFEST_NAME).is_file():
        raise ConvertError(
            f"{step_dir} has no {MANIFEST_NAME}: the checkpoint was not completely written"
        )
    return dcp_path


def convert(dcp_path: str | Path, output_path: str | Path) -> Path:
    """Write `<output_path>/model.safetensors` and `config.json`; return the safetensors path."""
    source = _resolve_dcp_dir(Path(dcp_path))
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(str(source))
    metadata = reader.read_metadata().state_dict_metadata
    if CONFIG_KEY not in metadata:
        raise ConvertError(f"{source} holds no {CONFIG_KEY}: not written by rljob_trainer")
    state: dict[str, object] = {
        key: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.items()
        if key.startswith(MODEL_PREFIX) and isinstance(meta, TensorStorageMetadata)
    }
    if not state:
        raise ConvertError(f"{source} holds no model weights")
    state[CONFIG_KEY] = ""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, storage_reader=reader, no_dist=True)
    config = json.loads(str(state.pop(CONFIG_KEY)))
    weights = {key[len(MODEL_PREFIX) :]: tensor for key, tensor in state.items()}
    out = Path(output_path)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "model.safetensors"
    save_file(weights, str(target), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return target


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
