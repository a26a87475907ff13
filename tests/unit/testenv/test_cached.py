"""rljob_testenv.cached: a reference run is made once for its inputs, and only whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from rljob_testenv import cached


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("RLJOB_CACHE_DIR", str(root))
    return root


def test_the_key_follows_the_arguments_the_sources_and_the_versions(tmp_path: Path):
    sources = tmp_path / "src"
    (sources / "pkg").mkdir(parents=True)
    (sources / "pkg" / "train.py").write_text("lr = 1\n")
    (sources / "notes.txt").write_text("not source\n")
    key = cached.inputs_key(["--lr=1"], [sources], ["torch"])

    assert cached.inputs_key(["--lr=1"], [sources], ["torch"]) == key
    assert cached.inputs_key(["--lr=2"], [sources], ["torch"]) != key
    assert cached.inputs_key(["--lr=1"], [sources], ["torch", "numpy"]) != key
    (sources / "notes.txt").write_text("still not source\n")
    assert cached.inputs_key(["--lr=1"], [sources], ["torch"]) == key
    (sources / "pkg" / "train.py").write_text("lr = 2\n")
    assert cached.inputs_key(["--lr=1"], [sources], ["torch"]) != key


def test_a_run_is_made_once_and_then_read(cache_root: Path):
    made: list[Path] = []

    def make(folder: Path) -> None:
        made.append(folder)
        (folder / "model.pt").write_text("weights")

    first, ran = cached.run_once("rljob", "abc", make)
    again, ran_again = cached.run_once("rljob", "abc", make)

    assert (ran, ran_again) == (True, False) and len(made) == 1
    assert first == again == cache_root / "references" / "rljob" / "abc"
    assert (first / "model.pt").read_text() == "weights"


def test_a_run_that_fails_leaves_no_entry(cache_root: Path):
    def fail(folder: Path) -> None:
        (folder / "half.pt").write_text("half")
        raise RuntimeError("the reference run failed")

    with pytest.raises(RuntimeError):
        cached.run_once("rljob", "abc", fail)

    assert list((cache_root / "references" / "rljob").iterdir()) == []
