"""Each layout's rule for "complete", on whole folders and on every way they tear."""

from __future__ import annotations

import pytest
from ckpt_trees import BUILDERS, INC, OK, TORN, VARIANTS, snapshot
from rljob_operator.checkpoints import verify_folder


def test_every_tear_of_every_builder_has_an_expectation():
    built = {(variant, tear) for variant, (_, tears) in BUILDERS.items() for tear in tears}
    assert built | {("rljob", "wrong_step")} == set(TORN)


@pytest.mark.parametrize("verify", ["quick", "deep"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_whole_folder_is_complete_under_its_layout(tmp_path, variant, verify):
    build, _ = BUILDERS[variant]
    folder = build(tmp_path, 40, None)
    judged = verify_folder(folder, VARIANTS[variant][0], verify)
    assert (judged.verdict.status, judged.step, judged.path) == (OK, 40, folder)
    assert judged.verdict.layout == VARIANTS[variant][0]


@pytest.mark.parametrize(
    "variant", sorted(v for v, (_, auto) in VARIANTS.items() if auto and v != "rlinf-fsdp-old")
)
def test_auto_recognises_a_whole_folder(tmp_path, variant):
    folder = BUILDERS[variant][0](tmp_path, 40, None)
    judged = verify_folder(folder)
    assert (judged.verdict.status, judged.verdict.layout) == (OK, VARIANTS[variant][1])


def test_auto_reads_dcp_in_actor_without_manifest_strictly_and_says_how_to_override(tmp_path):
    folder = BUILDERS["rlinf-fsdp-old"][0](tmp_path, 40, None)
    verdict = verify_folder(folder).verdict
    assert (verdict.status, verdict.layout) == (INC, "rljob")
    assert "--layout rlinf-fsdp" in verdict.reason


@pytest.mark.parametrize("verify", ["quick", "deep"])
@pytest.mark.parametrize(("variant", "tear"), sorted(TORN))
def test_torn_folder_gets_the_right_verdict_and_reason(tmp_path, variant, tear, verify):
    quick, deep, words = TORN[(variant, tear)]
    folder = BUILDERS[variant][0](tmp_path, 40, tear)
    before = snapshot(tmp_path)
    verdict = verify_folder(folder, VARIANTS[variant][0], verify).verdict
    assert verdict.status == (deep if verify == "deep" else quick)
    if not verdict.ok:
        assert words in verdict.reason
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("variant", "tear"),
    sorted(k for k in TORN if k[0] != "rlinf-fsdp-old" and VARIANTS[k[0]][1] is not None),
)
def test_auto_judges_a_torn_folder_as_its_layout_would(tmp_path, variant, tear):
    folder = BUILDERS[variant][0](tmp_path, 40, tear)
    explicit = verify_folder(folder, VARIANTS[variant][0], "deep").verdict
    assert verify_folder(folder, "auto", "deep").verdict.status == explicit.status
