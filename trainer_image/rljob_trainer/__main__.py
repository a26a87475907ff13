"""`python -m rljob_trainer --config <file.yaml> [key=value ...]`, under torchrun or alone."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from rljob_trainer.config import ConfigError, TrainerConfig, load_config
from rljob_trainer.place import GangError, place_from_env


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rljob_trainer",
        description="Resumable GRPO trainer on FSDP2 or megatron-core. Run under torchrun.",
    )
    parser.add_argument(
        "--config", help="YAML config file (default: the packaged configs/grpo_tiny.yaml)"
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="dotted overrides, e.g. runner.max_steps=50",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        place = place_from_env(os.environ)
    except GangError as exc:
        print(f"rljob_trainer: {exc}", file=sys.stderr)
        return 2
    rank = place.rank if place is not None else int(os.environ.get("RANK", "0"))
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format=f"[rank{rank}] %(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"rljob_trainer: config error: {exc}", file=sys.stderr)
        return 2
    from rljob_trainer.backends import run  # torch is imported only once the config is valid

    return run(cfg, reload)


def reload(argv: Sequence[str], env: Mapping[str, str]) -> TrainerConfig:
    """The configuration a later run's arguments and environment give (a warm restart)."""
    args = parse_args(argv)
    return load_config(args.config, args.overrides, env)


if __name__ == "__main__":
    sys.exit(main())
