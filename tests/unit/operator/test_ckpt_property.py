"""Over random directories of whole and torn folders: the answer always passes `verify`,
is the newest complete folder (never newer), and every newer entry is in `rejected`."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ckpt_trees import BUILDERS, OK, TORN, VARIANTS, snapshot, write_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rljob_operator.checkpoints import find_latest, verify_folder
from rljob_operator.checkpoints.layouts import LAYOUTS


@st.composite
def directories(draw):
    variant = draw(st.sampled_from(sorted(VARIANTS)))
    tears = [None, *sorted(tear for v, tear in TORN if v == variant)]
    folders = draw(st.dictionaries(st.integers(0, 60), st.sampled_from(tears), max_size=6))
    files = draw(st.sets(st.integers(0, 60).filter(lambda s: s not in folders), max_size=2))
    auto = variant != "rlinf-fsdp-old" and VARIANTS[variant][1] is not None and draw(st.booleans())
    verify = draw(st.sampled_from(["quick", "deep"]))
    return variant, folders, files, "auto" if auto else VARIANTS[variant][0], verify


def is_complete(variant: str, tear: str | None, verify: str) -> bool:
    if tear is None:
        return True
    quick, deep, _ = TORN[(variant, tear)]
    return (deep if verify == "deep" else quick) == OK


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(directories())
def test_answer_passes_verify_and_is_the_newest_complete(case):
    variant, folders, files, layout, verify = case
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for step, tear in folders.items():
            BUILDERS[variant][0](root, step, tear)
        prefix = LAYOUTS[VARIANTS[variant][0]].folder_prefix  # global_step_, checkpoint-
        for step in files:
            write_text(root / f"{prefix}{step}", "not a folder")
        before = snapshot(root)

        result = find_latest(root, layout, verify)

        complete = [s for s, tear in folders.items() if is_complete(variant, tear, verify)]
        assert result.step == max(complete, default=None)
        if result.found:
            assert verify_folder(result.path, layout, verify).verdict.ok
            assert result.path == str(root.resolve() / f"{prefix}{result.step}")
        newer = sorted(s for s in [*folders, *files] if result.step is None or s > result.step)
        assert [j.step for j in result.rejected] == newer[::-1]
        assert not any(j.verdict.ok for j in result.rejected)
        assert snapshot(root) == before
