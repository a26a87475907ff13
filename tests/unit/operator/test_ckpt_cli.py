"""`rljob ckpt ...`: exit codes, the JSON the operator parses, the termination-log file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from builders import make_job
from ckpt_trees import build_dcp, build_rljob, build_rljob_megatron, snapshot, write_text
from rljob_contract import progress
from rljob_contract.progress import PROGRESS_FILE_NAME
from rljob_operator.api.spec import parse_spec
from rljob_operator.cli import main
from rljob_operator.reconcile.lookup.finder import result_from_report

LATEST_KEYS = {
    "progress_step",
    "progress_step_seconds",
    "progress_save_seconds",
    "save_on_notice_unavailable",
    "save_on_notice_late",
    "progress_attempt",
    "progress_trained",
    "found",
    "step",
    "path",
    "layout",
    "verify",
    "rejected",
}
REJECTED_KEYS = {"step", "path", "verdict", "reason"}


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(["ckpt", *map(str, argv)])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_latest_json_has_the_documented_shape(tmp_path, capsys):
    build_rljob(tmp_path, 150)
    build_rljob(tmp_path, 200, "no_manifest")
    code, out, _ = run(capsys, "latest", tmp_path, "--json")
    answer = json.loads(out)
    assert code == 0
    assert set(answer) == LATEST_KEYS
    assert answer["found"] is True
    assert answer["step"] == 150
    assert answer["path"] == str(tmp_path.resolve() / "global_step_150")
    assert (answer["layout"], answer["verify"]) == ("rljob", "quick")
    assert [set(r) for r in answer["rejected"]] == [REJECTED_KEYS]
    assert answer["rejected"][0]["step"] == 200
    assert answer["rejected"][0]["verdict"] == "incomplete"


def test_latest_reports_what_the_bridge_said_of_its_save_on_notice(tmp_path, capsys):
    """The bridge's record beside a verl run's folders: its words reach the operator, cut to
    a length a status can carry; a value that is not words is left out."""
    build_rljob(tmp_path, 150)
    late = "verl 0.10.2: verl.trainer.ppo.v1.trainer_base.PPOTrainer._save_checkpoint " + "x" * 2000
    record = {progress.STEP: 151, progress.SAVE_ON_NOTICE_LATE: late,
              progress.SAVE_ON_NOTICE_UNAVAILABLE: ["not", "words"]}  # fmt: skip
    write_text(tmp_path / progress.FRAMEWORK_PROGRESS_FILE_NAME, json.dumps(record))
    _, out, _ = run(capsys, "latest", tmp_path, "--json")
    answer = json.loads(out)
    assert answer["progress_step"] == 151
    assert answer["save_on_notice_late"] == late[:1000]
    assert answer["save_on_notice_unavailable"] is None


def test_latest_with_nothing_found_exits_1_with_nulls(tmp_path, capsys):
    build_rljob(tmp_path, 200, "no_manifest")
    code, out, _ = run(capsys, "latest", tmp_path, "--json", "--verify", "deep")
    answer = json.loads(out)
    assert code == 1
    assert {k: answer[k] for k in ("found", "step", "path", "layout", "verify")} == {
        "found": False,
        "step": None,
        "path": None,
        "layout": None,
        "verify": "deep",
    }
    assert len(answer["rejected"]) == 1


def test_latest_text_names_the_folder_and_the_rejections(tmp_path, capsys):
    build_rljob(tmp_path, 150)
    build_rljob(tmp_path, 200, "size_mismatch")
    code, out, _ = run(capsys, "latest", tmp_path)
    assert code == 0
    assert out.splitlines()[0].startswith(str(tmp_path.resolve() / "global_step_150"))
    assert "step 200: corrupt: data/data.pt is 10 bytes" in out


def test_no_checkpoint_text_says_so(tmp_path, capsys):
    code, out, _ = run(capsys, "latest", tmp_path)
    assert (code, out.splitlines()[0]) == (1, f"no complete checkpoint in {tmp_path.resolve()}")


def test_with_missing_ok_a_directory_not_made_yet_is_no_checkpoint_not_an_error(tmp_path, capsys):
    out_file = tmp_path / "report.json"
    code, out, err = run(capsys, "latest", tmp_path / "not-yet", "--missing-ok", "--json",
                         "--output", out_file)  # fmt: skip
    assert (code, err) == (1, "")
    report = json.loads(out)
    assert report["found"] is False and report["missing"] is True
    assert json.loads(out_file.read_text()) == report
    # A file where the directory should be is still bad input.
    write_text(tmp_path / "file", "x")
    code, _, err = run(capsys, "latest", tmp_path / "file", "--missing-ok")
    assert code == 2 and "not a directory" in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["latest", "{d}/missing"], "missing: no such directory"),
        (["latest", "{d}/file"], "file: not a directory"),
        (["list", "{d}", "--layout", "megatron"], "unknown layout 'megatron'"),
        (["latest", "{d}", "--verify", "paranoid"], "unknown verify mode 'paranoid'"),
        (["verify", "{d}/file"], "not a global_step_N folder"),
        (["verify", "{d}/global_step_1"], "global_step_1: not a directory"),
        (["latest", "{d}", "--output", "{d}/no/such/dir/out.json"], "cannot write"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_problem(tmp_path, capsys, argv, words):
    write_text(tmp_path / "file", "x")
    write_text(tmp_path / "global_step_1", "x")
    code, out, err = run(capsys, *(a.format(d=tmp_path) for a in argv))
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1
    assert err.startswith("rljob: error: ") and words in err


def test_list_shows_every_candidate_newest_first_and_exits_0_if_one_is_complete(tmp_path, capsys):
    build_dcp(tmp_path, 1)
    build_dcp(tmp_path, 2, "no_metadata")
    code, out, _ = run(capsys, "list", tmp_path, "--json")
    listed = json.loads(out)
    assert code == 0
    assert listed["verify"] == "quick"
    assert [(c["step"], c["verdict"], c["layout"]) for c in listed["checkpoints"]] == [
        (2, "incomplete", "dcp"),
        (1, "complete", "dcp"),
    ]
    code, out, _ = run(capsys, "list", tmp_path)
    assert code == 0 and len(out.splitlines()) == 2


def test_list_without_a_complete_checkpoint_exits_1(tmp_path, capsys):
    build_dcp(tmp_path, 2, "no_metadata")
    assert run(capsys, "list", tmp_path)[0] == 1


@pytest.mark.parametrize(("tear", "code"), [(None, 0), ("no_metadata", 1)])
def test_verify_exit_code_follows_the_verdict(tmp_path, capsys, tear, code):
    folder = build_dcp(tmp_path, 3, tear)
    got, out, _ = run(capsys, "verify", f"{folder}/", "--json")
    answer = json.loads(out)
    assert got == code
    assert set(answer) == {"step", "path", "verdict", "reason", "layout", "verify"}
    assert (answer["step"], answer["path"]) == (3, str(folder))


def test_output_file_holds_the_same_json(tmp_path, capsys):
    build_dcp(tmp_path / "run", 5)
    out_file = tmp_path / "termination-log"
    code, out, _ = run(capsys, "latest", tmp_path / "run", "--json", "--output", out_file)
    assert code == 0
    assert json.loads(out_file.read_text()) == json.loads(out)


def test_output_file_drops_the_oldest_rejections_to_fit_4096_bytes(tmp_path, capsys):
    run_dir = tmp_path / "run-with-a-rather-long-name-to-make-every-entry-longer"
    build_dcp(run_dir, 1)
    for step in range(2, 302):
        write_text(run_dir / f"global_step_{step}", "a plain file where a folder should be")
    before = snapshot(run_dir)
    out_file = tmp_path / "termination-log"
    code, out, _ = run(capsys, "latest", run_dir, "--json", "--output", out_file)
    full = json.loads(out)
    fitted_text = out_file.read_bytes()
    fitted = json.loads(fitted_text)
    assert code == 0 and len(full["rejected"]) == 300
    assert len(fitted_text) <= 4096
    kept = len(fitted["rejected"])
    assert 0 < kept < 300
    assert fitted["rejected_truncated"] == 300 - kept
    assert fitted["rejected"] == full["rejected"][:kept]  # the newest are kept
    assert {k: v for k, v in fitted.items() if k != "rejected" and k != "rejected_truncated"} == {
        k: v for k, v in full.items() if k != "rejected"
    }
    assert snapshot(run_dir) == before


def test_installed_command_exits_with_the_same_codes(tmp_path):
    build_dcp(tmp_path, 4)
    command = [sys.executable, "-m", "rljob_operator", "ckpt", "latest"]
    found = subprocess.run([*command, str(tmp_path)], capture_output=True, text=True)
    missing = subprocess.run([*command, str(tmp_path / "x")], capture_output=True, text=True)
    assert (found.returncode, missing.returncode) == (0, 2)
    assert missing.stderr.strip() == f"rljob: error: {tmp_path / 'x'}: no such directory"


def test_latest_excludes_every_folder_given_with_exclude(tmp_path, capsys):
    for step in (1, 2, 3):
        build_dcp(tmp_path, step)
    code, out, _ = run(
        capsys, "latest", tmp_path, "--json", "--exclude", tmp_path / "global_step_3",
        "--exclude", tmp_path / "global_step_2",
    )  # fmt: skip
    answer = json.loads(out)
    assert (code, answer["step"]) == (0, 1)
    assert [r["verdict"] for r in answer["rejected"]] == ["excluded", "excluded"]


@pytest.mark.parametrize(
    ("progress", "step", "seconds"),
    [
        ({"step": 163, "step_seconds": 4.25}, 163, 4.25),
        ({"step": 163}, 163, None),  # an older trainer wrote no step time
        ({"step": 163, "step_seconds": -1}, 163, None),
        ({"step": 163, "step_seconds": "4"}, 163, None),
        ({"step": 163, "step_seconds": True}, 163, None),
        ({"step": -2, "step_seconds": 4.0}, None, 4.0),
    ],
)
def test_latest_json_reports_the_trainers_progress_and_step_time(
    tmp_path, capsys, progress, step, seconds
):
    build_rljob(tmp_path, 150)
    write_text(tmp_path / "progress.json", json.dumps(progress))

    _, out, _ = run(capsys, "latest", tmp_path, "--json")

    answer = json.loads(out)
    assert (answer["progress_step"], answer["progress_step_seconds"]) == (step, seconds)


UNSEALED = "rljob_manifest.json is missing: the save did not finish"
# step: (how rljob's Megatron save of it ended, its verdict, words of its reason)
MEGATRON_SAVES = {
    80: ("changed_shard", "corrupt", "__1_0.distcp does not match its sha256"),
    70: ("truncated_shard", "corrupt", "__1_0.distcp is 120 bytes, rljob_manifest.json says 200"),
    60: ("no_manifest", "incomplete", f"{UNSEALED} (actor/iter_0000060/ whole; the manifest is"),
    50: ("no_tracker", "incomplete", f"{UNSEALED} (actor/latest_checkpointed_iteration.txt is"),
    40: ("no_metadata_json", "incomplete", f"{UNSEALED} (actor/iter_0000040/metadata.json is"),
    30: ("shards_only", "incomplete", f"{UNSEALED} (actor/iter_0000030/.metadata is missing"),
}  # fmt: skip


@pytest.mark.parametrize(("layout", "progress"), [("rljob", False), ("auto", True)])
def test_latest_skips_each_torn_or_corrupt_rljob_megatron_save_saying_how_far_it_got(
    tmp_path, capsys, layout, progress
):
    """auto reads the trainer's directory (its progress.json) as rljob: a save torn before
    the manifest is never taken for a complete rlinf-megatron folder."""
    for step in (10, 20):
        build_rljob_megatron(tmp_path, step)
    for step, (tear, _, _) in MEGATRON_SAVES.items():
        build_rljob_megatron(tmp_path, step, tear)
    if not progress:
        (tmp_path / PROGRESS_FILE_NAME).unlink()

    code, out, _ = run(capsys, "latest", tmp_path, "--layout", layout, "--verify", "deep", "--json")

    answer = json.loads(out)
    assert (code, answer["step"], answer["layout"]) == (0, 20, "rljob")
    rejected = {r["step"]: (r["verdict"], r["reason"]) for r in answer["rejected"]}
    assert list(rejected) == list(MEGATRON_SAVES)
    for step, (_, verdict, words) in MEGATRON_SAVES.items():
        assert rejected[step][0] == verdict and words in rejected[step][1], rejected[step]


TIMED = {
    progress.ATTEMPT: 2,
    progress.FIRST_STEP_UNIX_TIME: 10.5,
    progress.LAST_STEP_UNIX_TIME: 99.25,
}


@pytest.mark.parametrize(
    ("fields", "attempt", "trained"),
    [
        (TIMED, 2, [10.5, 99.25]),
        ({**TIMED, progress.LAST_STEP_UNIX_TIME: 10.0}, 2, None),  # out of order
        ({progress.ATTEMPT: True, progress.FIRST_STEP_UNIX_TIME: "10"}, None, None),
        ({}, None, None),  # an older trainer timed nothing
    ],
)
def test_latest_json_reports_the_attempt_and_when_it_trained_and_the_operator_reads_it(
    tmp_path, capsys, fields, attempt, trained
):
    build_rljob(tmp_path, 150)
    write_text(tmp_path / "progress.json", json.dumps({progress.STEP: 151, **fields}))

    _, out, _ = run(capsys, "latest", tmp_path, "--json")

    answer = json.loads(out)
    assert (answer["progress_attempt"], answer["progress_trained"]) == (attempt, trained)
    spec = parse_spec(make_job()["spec"])
    span = result_from_report(spec, answer).trained
    if trained is None:
        assert span is None
    else:
        assert (span.attempt, span.first.timestamp(), span.last.timestamp()) == (2, 10.5, 99.25)
