"""The `rljob` command: the operator and the checkpoint tools, plus installed plugin commands.

A distribution adds a subcommand through the `rljob.commands` entry-point group, a
function that takes the subparsers, and one under `rljob ckpt` through
`rljob.ckpt_commands`: the test tooling (rljob-devtools) adds `testenv`, and the trainer
(rljob-trainer) `ckpt convert`, so that the operator imports neither.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

PLUGIN_GROUP = "rljob.commands"
CKPT_PLUGIN_GROUP = "rljob.ckpt_commands"


def _add_plugins(group: str, subparsers: argparse._SubParsersAction) -> None:
    for plugin in sorted(entry_points(group=group), key=lambda e: e.name):
        plugin.load()(subparsers)


def build_parser() -> argparse.ArgumentParser:
    from . import operator_cli
    from .checkpoints import cli as ckpt_cli

    parser = argparse.ArgumentParser(
        prog="rljob",
        description="Keep long RL training jobs running through preemption.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    operator_cli.register(subparsers)
    _add_plugins(PLUGIN_GROUP, subparsers)
    _add_plugins(CKPT_PLUGIN_GROUP, ckpt_cli.register(subparsers))
    return parser


class CommandError(RuntimeError):
    """What a plugin command raises (or subclasses) to end with `rljob: error: <message>`."""


def main(argv: Sequence[str] | None = None) -> None:
    from .checkpoints.cli import ERRORS as CKPT_ERRORS

    args = build_parser().parse_args(argv)
    try:
        sys.exit(args.handler(args))
    except CKPT_ERRORS as exc:  # bad input: exit 2, as argparse does
        print(f"rljob: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except CommandError as exc:
        sys.exit(f"rljob: error: {exc}")
    except KeyboardInterrupt:
        sys.exit(130)
