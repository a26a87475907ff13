"""Nothing raises out of `rljob ckpt` (issue #17): whatever bytes stand in any file of any
layout's folder, or in the run's progress and tracker files, and whatever a folder is
called, every input gets a verdict (exit 0 or 1, JSON on stdout) or one line on stderr
with exit 2. The inspector pod's exact command is the one fuzzed."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from ckpt_trees import BUILDERS, VARIANTS, write_tracker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rljob_operator.cli import main

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
CONTENTS = st.one_of(
    st.binary(max_size=2048),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 200_000).map(lambda n: b"[" * n),  # nested past any recursion limit
    st.sampled_from([b"", b"\xed\xb3\xbf", b"99999999999999999999999", b"-1", b"1e400"]),
)
NAMES = st.one_of(
    st.integers(0, 10**30).map(lambda n: f"global_step_{n}"),
    st.binary(min_size=1, max_size=12).map(
        lambda b: "global_step_" + os.fsdecode(b.replace(b"/", b"_").replace(b"\0", b"_"))
    ),
)


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def run_inspector_command(capsys, directory: Path, layout: str, verify: str, output: Path):
    with pytest.raises(SystemExit) as exit_info:
        main(["ckpt", "latest", str(directory), "--layout", layout, "--verify", verify,
              "--within", str(directory), "--json", "--output", str(output)])  # fmt: skip
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def assert_answered(code: int, out: str, err: str, output: Path) -> None:
    if code == 2:
        assert out == "" and len(err.strip().splitlines()) == 1, err
        return
    assert code in (0, 1), (code, err)
    answer = json.loads(out)
    written = json.loads(output.read_text(encoding="ascii"))  # fitted to 4096 bytes
    assert written.get("rejected_truncated") or written == answer


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    variant=st.sampled_from(sorted(VARIANTS)),
    which=st.integers(0, 10_000),
    content=CONTENTS,
    verify=st.sampled_from(["quick", "deep"]),
    auto=st.booleans(),
)
def test_any_bytes_in_any_file_get_a_verdict(capsys, variant, which, content, verify, auto):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        folder = BUILDERS[variant][0](root, 7, None)
        write_tracker(root, 7)
        (root / "progress.json").write_text('{"step": 7}')
        targets = [
            *files_of(folder),
            root / "progress.json",
            root / "latest_checkpointed_iteration.txt",
        ]
        targets[which % len(targets)].write_bytes(content)
        layout = "auto" if auto else VARIANTS[variant][0]

        code, out, err = run_inspector_command(capsys, root, layout, verify, Path(tmp) / "out")

        assert_answered(code, out, err, Path(tmp) / "out")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.lists(NAMES, min_size=1, max_size=5, unique=True))
def test_any_folder_names_get_a_verdict(capsys, names):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        BUILDERS["rljob"][0](root, 3, None)
        for name in names:
            try:
                (root / name).mkdir()
            except (FileExistsError, OSError):
                continue  # a name the file system will not take, or one already there

        code, out, err = run_inspector_command(capsys, root, "auto", "deep", Path(tmp) / "out")

        assert_answered(code, out, err, Path(tmp) / "out")
        if code == 0:
            assert json.loads(out)["step"] <= 2**63 - 1
