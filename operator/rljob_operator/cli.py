"""The `rljob` command: the operator, the checkpoint tools and the local test environment."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from rljob_testenv import cli as testenv_cli
    from rljob_trainer.convert import register_convert

    from . import operator_cli
    from .checkpoints import cli as ckpt_cli

    parser = argparse.ArgumentParser(
        prog="rljob",
        description="Keep long RL training jobs running through preemption.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    operator_cli.register(subparsers)
    testenv_cli.register(subparsers)
    register_convert(ckpt_cli.register(subparsers))  # convert needs torch only when it runs
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    from rljob_testenv.cli import ERRORS

    from .checkpoints.cli import ERRORS as CKPT_ERRORS

    args = build_parser().parse_args(argv)
    try:
        sys.exit(args.handler(args))
    except CKPT_ERRORS as exc:  # bad input: exit 2, as argparse does
        print(f"rljob: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ERRORS as exc:
        sys.exit(f"rljob: error: {exc}")
    except KeyboardInterrupt:
        sys.exit(130)
