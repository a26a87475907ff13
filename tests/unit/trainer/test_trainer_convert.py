"""`rljob ckpt convert` wiring: the subcommand hook and its errors (the conversion itself is
tested against a real 2-rank checkpoint in tests/trainer)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from rljob_operator.cli import build_parser
from rljob_trainer.convert import main, register_convert


def test_register_convert_adds_a_subcommand_with_a_handler(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="rljob")
    ckpt = parser.add_subparsers(dest="command").add_parser("ckpt")
    register_convert(ckpt.add_subparsers(dest="ckpt_command"))
    args = parser.parse_args(
        ["ckpt", "convert", "--dcp_path", str(tmp_path / "x"), "--output-path", str(tmp_path)]
    )
    assert args.dcp_path == str(tmp_path / "x")
    assert args.handler(args) == 1  # no such checkpoint


def test_the_rljob_command_gets_convert_from_the_trainers_entry_point(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["ckpt", "convert", "--dcp_path", str(tmp_path), "--output-path", str(tmp_path / "o")]
    )
    assert args.handler.__module__ == "rljob_trainer.convert"


def test_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dcp_path", str(tmp_path), "--output_path", str(tmp_path / "o")]) == 1
    assert "has no .metadata: it is not a DCP checkpoint folder" in capsys.readouterr().err
    torn = tmp_path / "global_step_5" / "actor"
    torn.mkdir(parents=True)
    (torn / ".metadata").write_bytes(b"")
    assert main(["--dcp_path", str(torn.parent), "--output_path", str(tmp_path / "o")]) == 1
    assert "global_step_5 has no rljob_manifest.json" in capsys.readouterr().err
