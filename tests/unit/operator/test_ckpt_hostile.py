"""Checkpoint files are untrusted input: hostile trees get a verdict or a one-line error,
never a traceback (issue #17's reproductions, one test each)."""

from __future__ import annotations

import json
import os
import tracemalloc

from ckpt_trees import build_dcp, build_rljob, build_verl_fsdp, snapshot, write_text
from rljob_contract.steps import MAX_STEP, parse_step
from rljob_operator.checkpoints import find_latest, verify_folder
from rljob_operator.checkpoints.dcp import MAX_ARGUMENT_BYTES
from test_ckpt_cli import run

DEEP = "[" * 100_000


def test_a_manifest_nested_too_deeply_is_corrupt_not_a_crash(tmp_path, capsys):
    build_rljob(tmp_path, 1)
    write_text(build_rljob(tmp_path, 2) / "rljob_manifest.json", DEEP)

    code, out, err = run(capsys, "latest", tmp_path, "--json")

    answer = json.loads(out)
    assert (code, answer["step"], err) == (0, 1, "")
    assert answer["rejected"][0]["verdict"] == "corrupt"
    assert "nested too deeply" in answer["rejected"][0]["reason"]


def test_verl_fsdp_config_nested_too_deeply_is_rejected(tmp_path):
    build_verl_fsdp(tmp_path, 1)
    write_text(build_verl_fsdp(tmp_path, 2) / "actor" / "fsdp_config.json", DEEP)
    result = find_latest(tmp_path, "verl-fsdp")
    assert result.step == 1
    assert "nested too deeply" in result.rejected[0].verdict.reason


def test_a_progress_file_nested_too_deeply_is_no_progress(tmp_path, capsys):
    build_rljob(tmp_path, 1)
    write_text(tmp_path / "progress.json", DEEP)
    code, out, _ = run(capsys, "latest", tmp_path, "--json")
    assert (code, json.loads(out)["progress_step"]) == (0, None)


def test_output_file_takes_names_that_are_not_utf8(tmp_path, capsys):
    """The inspector pod's exact command, on a directory whose name is not UTF-8."""
    root = tmp_path / os.fsdecode(b"run\xed\xb3\xbf")
    build_rljob(tmp_path / "run", 3)
    (tmp_path / "run").rename(root)
    output = tmp_path / "termination-log"

    code, out, err = run(capsys, "latest", root, "--verify", "deep", "--json", "--output", output)

    assert (code, err) == (0, "")
    written = json.loads(output.read_text(encoding="ascii"))  # escaped, so plain ASCII
    assert written["step"] == 3
    assert written["path"] == json.loads(out)["path"] == str(root.resolve() / "global_step_3")


def test_a_step_beyond_int64_is_no_checkpoint(tmp_path, capsys):
    """Kubernetes integers are int64: such a step could never be written to the status."""
    build_rljob(tmp_path, 5)
    (tmp_path / f"global_step_{MAX_STEP + 1}").mkdir()
    (tmp_path / "global_step_99999999999999999999").mkdir()
    before = snapshot(tmp_path)

    code, out, _ = run(capsys, "latest", tmp_path, "--json")

    answer = json.loads(out)
    assert (code, answer["step"], answer["rejected"]) == (0, 5, [])
    assert parse_step(f"global_step_{MAX_STEP}") == MAX_STEP
    assert parse_step(f"global_step_{MAX_STEP + 1}") is None
    assert snapshot(tmp_path) == before


def test_a_huge_metadata_is_streamed_and_refused_within_the_inspectors_memory(tmp_path):
    """512 MiB used to be read whole; now no read of it exceeds MAX_ARGUMENT_BYTES."""
    folder = build_dcp(tmp_path, 4)
    meta = folder / ".metadata"
    size = 96 * 1024 * 1024
    with meta.open("wb") as fh:  # a pickle whose one argument is 96 MiB of bytes
        fh.write(b"\x80\x04\x8e" + size.to_bytes(8, "little"))
        fh.truncate(3 + 8 + size)
        fh.seek(0, 2)
        fh.write(b".")
    tracemalloc.start()
    try:
        verdict = verify_folder(folder, "dcp", "deep").verdict
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert verdict.status.value == "corrupt"
    assert f"an opcode argument of {size} bytes" in verdict.reason
    assert peak < 2 * MAX_ARGUMENT_BYTES
