"""Which checkpoint folders count as complete, which is newest, and which retention removes."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rljob_contract.manifest import MANIFEST_NAME, write_manifest
from rljob_contract.steps import parse_step
from rljob_trainer.checkpoint import (
    choose_checkpoints_to_delete,
    incomplete_reason,
    list_checkpoints,
    newest_complete,
)
from rljob_trainer.fsdp.checkpoint import sealed_files


def test_the_step_folder_pattern_recognises_only_step_folders() -> None:
    assert parse_step("global_step_150") == 150
    for name in ("global_step_", "global_step_1a", "global_step_1.tmp", "step_1", "latest"):
        assert parse_step(name) is None


def test_retention_keeps_the_newest_complete() -> None:
    entries = [
        ("global_step_10", True),
        ("global_step_30", True),
        ("global_step_20", True),
        ("global_step_40", False),  # being written
        ("global_step_5", False),  # torn by a crash
        ("best", True),  # not ours
    ]
    assert choose_checkpoints_to_delete(entries, keep=2) == ["global_step_10"]
    assert choose_checkpoints_to_delete(entries, keep=1) == ["global_step_10", "global_step_20"]
    assert choose_checkpoints_to_delete(entries, keep=3) == []
    assert choose_checkpoints_to_delete(entries, keep=0) == []


@given(
    st.dictionaries(st.integers(0, 10_000), st.booleans(), max_size=12),
    st.integers(0, 5),
)
def test_retention_properties(folders: dict[int, bool], keep: int) -> None:
    entries = [(f"global_step_{s}", ok) for s, ok in folders.items()] + [("notes", True)]
    deleted = choose_checkpoints_to_delete(entries, keep)
    complete = sorted(s for s, ok in folders.items() if ok)
    deleted_steps = [parse_step(name) for name in deleted]
    assert all(folders[s] for s in deleted_steps)  # never an incomplete one
    assert len(deleted) == (max(0, len(complete) - keep) if keep else 0)
    if complete:
        assert complete[-1] not in deleted_steps  # never the newest complete
    assert deleted_steps == complete[: len(deleted)]  # the oldest go first


def _fake_checkpoint(root: Path, step: int, sealed: bool = True) -> Path:
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / ".metadata").write_bytes(b"meta")
    (folder / "actor" / "__0_0.distcp").write_bytes(b"x" * step)
    if sealed:
        write_manifest(folder, step, world_size=1)
    return folder


def test_completeness_needs_the_manifest_and_the_files_it_names(tmp_path: Path) -> None:
    good = _fake_checkpoint(tmp_path, 3)
    assert incomplete_reason(good, sealed_files) is None
    torn = _fake_checkpoint(tmp_path, 6, sealed=False)
    assert "no rljob_manifest.json: the trainer writes it last" in str(
        incomplete_reason(torn, sealed_files)
    )
    assert "does not exist" in str(incomplete_reason(tmp_path / "global_step_9", sealed_files))

    truncated = _fake_checkpoint(tmp_path, 12)
    (truncated / "actor" / "__0_0.distcp").write_bytes(b"x")
    assert "actor/__0_0.distcp is 1 bytes, rljob_manifest.json says 12" in str(
        incomplete_reason(truncated, sealed_files)
    )
    missing = _fake_checkpoint(tmp_path, 15)
    (missing / "actor" / "__0_0.distcp").unlink()
    assert "actor/__0_0.distcp is listed in rljob_manifest.json but missing" in str(
        incomplete_reason(missing, sealed_files)
    )
    garbled = _fake_checkpoint(tmp_path, 18)
    (garbled / MANIFEST_NAME).write_text("{")
    assert "malformed" in str(incomplete_reason(garbled, sealed_files))


def test_newest_complete_skips_torn_and_foreign_folders(tmp_path: Path) -> None:
    assert newest_complete(tmp_path / "absent", sealed_files) is None
    _fake_checkpoint(tmp_path, 3)
    _fake_checkpoint(tmp_path, 20)
    _fake_checkpoint(tmp_path, 100, sealed=False)
    (tmp_path / "global_step_999.old").mkdir()
    assert newest_complete(tmp_path, sealed_files) == tmp_path / "global_step_20"
    assert sorted(list_checkpoints(tmp_path, sealed_files)) == [
        ("global_step_100", False),
        ("global_step_20", True),
        ("global_step_3", True),
    ]
