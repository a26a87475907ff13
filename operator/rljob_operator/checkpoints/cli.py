"""`rljob ckpt ...`: find, list and verify checkpoints from a shell or the inspector pod.

Exit codes: 0 found / complete, 1 none found / not complete, 2 bad input (raised as
CheckpointInputError and turned into a one-line error by `rljob_operator.cli.main`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .errors import CheckpointInputError
from .latest import (
    VERIFY_MODES,
    Judged,
    LatestResult,
    find_latest,
    list_checkpoints,
    verify_folder,
)
from .layouts import AUTO, CHOICES
from .progress import read_progress
from .report import dumps, fit_json

ERRORS = (CheckpointInputError,)


def register(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Add `rljob ckpt`; returns its subcommands, so that the trainer can add `convert`."""
    parser = subparsers.add_parser(
        "ckpt", help="find, list and verify checkpoints (rljob, RLinf, verl, plain DCP)"
    )
    commands = parser.add_subparsers(dest="ckpt_command", required=True)

    def command(name: str, help_text: str, target: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("path", metavar=target)
        sub.add_argument(
            "--layout", default=AUTO, help=f"one of {', '.join(CHOICES)} (default: auto)"
        )
        sub.add_argument(
            "--verify",
            default="quick",
            help=f"{' or '.join(VERIFY_MODES)}: markers and sizes, or also contents",
        )
        sub.add_argument("--json", action="store_true", help="print JSON (docs/checkpoints.md)")
        return sub

    latest = command("latest", "the newest complete checkpoint", "DIR")
    latest.add_argument(
        "--exclude",
        metavar="FOLDER",
        action="append",
        default=[],
        help="a global_step_N folder not to resume from, whatever it holds (repeatable)",
    )
    latest.add_argument(
        "--missing-ok",
        action="store_true",
        help="a DIR that does not exist is no checkpoint yet (exit 1), not an error: what a "
        "job that never saved has (the inspector pod passes it)",
    )
    latest.set_defaults(handler=_latest)
    command("list", "every global_step_N with its verdict, newest first", "DIR").set_defaults(
        handler=_list
    )
    verify = command("verify", "the verdict on one global_step_N folder", "FOLDER")
    verify.set_defaults(handler=_verify)
    for sub in (latest, verify):  # the inspector pod's options
        sub.add_argument(
            "--output", metavar="FILE", help="also write the JSON to FILE, fitted to 4096 bytes"
        )
        sub.add_argument(
            "--within",
            metavar="ROOT",
            help="refuse a path that resolves (symlinks too) outside ROOT",
        )
    return commands


def _latest(args: argparse.Namespace) -> int:
    if args.missing_ok and not os.path.lexists(args.path):
        payload = {**LatestResult(args.verify, None, ()).to_dict(), "missing": True}
        if args.output:
            _write(args.output, fit_json(payload))
        print(dumps(payload) if args.json else f"{args.path} does not exist yet")
        return 1
    result = find_latest(
        args.path, args.layout, args.verify, exclude=args.exclude, within=args.within
    )
    payload = {**result.to_dict(), **read_progress(args.path).to_report()}
    if args.output:
        _write(args.output, fit_json(payload))
    if args.json:
        print(dumps(payload))
    elif result.chosen:
        print(f"{result.chosen.path}  (step {result.chosen.step}, {_how(result.chosen)})")
        _print_rejected(result.rejected, "newer, rejected:")
    else:
        print(f"no complete checkpoint in {Path(args.path).resolve()}")
        _print_rejected(result.rejected, "rejected:")
    return 0 if result.found else 1


def _list(args: argparse.Namespace) -> int:
    judged = list_checkpoints(args.path, args.layout, args.verify)
    if args.json:
        print(dumps({"verify": args.verify, "checkpoints": [j.to_dict() for j in judged]}))
    else:
        for j in judged:
            print(f"{j.step:>10}  {_how(j):<28}  {j.path.name}  {j.verdict.reason}")
    return 0 if any(j.verdict.ok for j in judged) else 1


def _verify(args: argparse.Namespace) -> int:
    judged = verify_folder(args.path, args.layout, args.verify, within=args.within)
    payload = dict(judged.to_dict(), verify=args.verify)
    if args.output:
        _write(args.output, fit_json(payload))
    if args.json:
        print(dumps(payload))
    else:
        print(f"{judged.path}: {_how(judged)}: {judged.verdict.reason}")
    return 0 if judged.verdict.ok else 1


def _how(judged: Judged) -> str:
    layout = f" ({judged.verdict.layout})" if judged.verdict.layout else ""
    return f"{judged.verdict.status.value}{layout}"


def _print_rejected(rejected: tuple[Judged, ...], title: str) -> None:
    if rejected:
        print(title)
    for j in rejected:
        print(f"  step {j.step}: {j.verdict.status.value}: {j.verdict.reason}")


def _write(output: str, text: str) -> None:
    try:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise CheckpointInputError(f"cannot write {output}: {exc.strerror}") from exc
