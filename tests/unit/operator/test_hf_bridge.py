"""rljob's bridge into Hugging Face's Trainer (rljob_podside/rljob_hf_bridge.py), one call at a
time: its callback driven through transformers' own TrainerCallback, TrainerState and
TrainerControl (one process, so the ranks' agreement is this process's notice), and its rules
as a guest. The whole run, TRL's GRPOTrainer under torchrun, is tests/trainer/test_trl_resume.py's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import rljob_contract as contract
import rljob_hf_bridge as bridge
from rljob_contract import progress
from transformers.trainer_callback import TrainerCallback, TrainerControl, TrainerState

ARGS = SimpleNamespace(device="cpu")


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A notice with its request file and checkpoint folder, rljob's callback on it, and the
    state of a run at step 5 of 8."""
    monkeypatch.setenv(contract.ENV_TERMINATION_LOG, str(tmp_path / "termination-log"))
    request = tmp_path / "checkpoint-request"
    request.write_text("")  # projected, empty until the operator asks
    notice = bridge.Notice(str(request), str(tmp_path / "out"), "2")
    callback = bridge.callback_class(TrainerCallback, notice)()
    state = TrainerState(global_step=5, max_steps=8)
    callback.on_train_begin(ARGS, state, TrainerControl())
    return SimpleNamespace(notice=notice, callback=callback, state=state, request=request,
                           record=tmp_path / "out" / progress.FRAMEWORK_PROGRESS_FILE_NAME,
                           termination=tmp_path / "termination-log")  # fmt: skip


def record(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_step_end_without_notice_reports_the_step_and_changes_nothing(run):
    control = run.callback.on_step_end(ARGS, run.state, TrainerControl())
    assert not control.should_save and not control.should_training_stop
    written = record(run.record)
    assert (written["step"], written["status"], written["attempt"]) == (5, progress.RUNNING, 2)


def test_a_request_saves_the_step_that_just_ended_then_exits_75_once_it_is_saved(run):
    run.request.write_text("2026-12-04T21:00:00Z")
    control = run.callback.on_step_end(ARGS, run.state, TrainerControl())
    assert control.should_save and control.should_training_stop
    with pytest.raises(SystemExit) as stopped:
        run.callback.on_save(ARGS, run.state, control)
    assert stopped.value.code == contract.EXIT_CHECKPOINTED_ON_REQUEST
    written = record(run.record)
    assert (written["step"], written["status"]) == (5, progress.CHECKPOINTED_ON_REQUEST)
    assert run.termination.read_text().startswith(contract.CHECKPOINTED_ON_REQUEST_MESSAGE)


def test_a_notice_during_a_periodic_save_stops_with_that_save_and_trains_no_further_step(run):
    control = TrainerControl(should_save=True)  # the Trainer's flow callback: step 5 saves
    control = run.callback.on_step_end(ARGS, run.state, control)
    assert not control.should_training_stop  # no notice yet
    run.notice.on_sigterm(signal.SIGTERM, None)  # torchrun passes the pod's SIGTERM on
    with pytest.raises(SystemExit) as stopped:
        run.callback.on_save(ARGS, run.state, control)
    assert stopped.value.code == contract.EXIT_CHECKPOINTED_ON_REQUEST
    assert record(run.record)["step"] == 5


def test_a_save_the_trainer_skipped_after_the_notice_is_no_success(run):
    """save_strategy "best" can turn the save off after rljob asked for it: the run stopped
    early, unsaved, and must not look finished."""
    run.request.write_text("2026-12-04T21:00:00Z")
    control = run.callback.on_step_end(ARGS, run.state, TrainerControl())
    with pytest.raises(SystemExit) as stopped:
        run.callback.on_train_end(ARGS, run.state, control)
    assert stopped.value.code == 128 + signal.SIGTERM


def test_a_trainer_without_add_callback_runs_as_it_is_and_the_record_says_why(tmp_path):
    """A Trainer of another shape (a stand-in class here: no `add_callback`): the user's
    object is made as before, and the progress record says why there is no save on notice,
    claiming no step."""
    notice = bridge.Notice(None, str(tmp_path), "0")

    class Trainer:
        def __init__(self, value):
            self.value = value

    Trainer.__init__ = bridge.wrap_trainer_init(Trainer.__init__, notice)
    assert Trainer(3).value == 3
    written = record(tmp_path / progress.FRAMEWORK_PROGRESS_FILE_NAME)
    assert written["step"] is None
    assert "the Trainer took no callback" in written[progress.SAVE_ON_NOTICE_UNAVAILABLE]
    assert signal.getsignal(signal.SIGTERM) != notice.on_sigterm  # SIGTERM left alone


SIGTERM_PROGRAM = """
import os, signal, sys, time
import rljob_hf_bridge as bridge
notice = bridge.Notice(None, None, None)
notice.take_sigterm()
notice.training = sys.argv[1] == "training"
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.5)  # not a test wait: a moment for the signal
print("alive", notice.signalled)
"""


@pytest.mark.parametrize("phase", ["training", "before"])
def test_sigterm_is_a_notice_only_while_a_trainer_trains(phase):
    """Before train() starts (or after it ends) nothing can be saved: SIGTERM ends the
    process as it would have without rljob."""
    podside = Path(bridge.__file__).parent
    done = subprocess.run([sys.executable, "-c", SIGTERM_PROGRAM, phase], capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(podside)})  # fmt: skip
    if phase == "training":
        assert (done.returncode, done.stdout.strip()) == (0, "alive SIGTERM"), done.stderr
    else:
        assert done.returncode == -signal.SIGTERM, (done.stdout, done.stderr)


SHADOW_TRAINER = """
class BaseTrainer:  # another transformers, whose trainer module has no Trainer
    pass
"""
USER_PROGRAM = """
import sys
import transformers.trainer as trainer
print("ran", sys.argv[1:], trainer.BaseTrainer.__name__)
sys.exit(3)
"""


def test_a_transformers_without_the_hooked_name_runs_the_program_as_it_is_and_says_why(tmp_path):
    """The bridge as torchrun starts it, over a `transformers` whose trainer module has no
    `Trainer` (a shadow package on the path): the user's program runs with its arguments and
    its own exit code, and the progress record says why there is no save on notice."""
    shadow = tmp_path / "shadow" / "transformers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("__version__ = '0.0-shadow'\n")
    (shadow / "trainer.py").write_text(SHADOW_TRAINER)
    (tmp_path / "train.py").write_text(USER_PROGRAM)
    podside, contract_dir = Path(bridge.__file__).parent, Path(contract.__file__).parent.parent
    env = {"PYTHONPATH": f"{tmp_path / 'shadow'}:{podside}:{contract_dir}",
           contract.ENV_CHECKPOINT_DIR: str(tmp_path / "out")}  # fmt: skip
    (tmp_path / "out").mkdir()
    done = subprocess.run([sys.executable, bridge.__file__, str(tmp_path / "train.py"), "--lr", "1"],
                          capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (3, "ran ['--lr', '1'] BaseTrainer"), (
        done.stderr
    )
    written = record(tmp_path / "out" / progress.FRAMEWORK_PROGRESS_FILE_NAME)
    why = written[progress.SAVE_ON_NOTICE_UNAVAILABLE]
    assert "transformers.trainer.Trainer.__init__ not found" in why, written


TWO_RANKS = """
import datetime, json, os, sys
import torch
import torch.distributed as dist
from transformers.trainer_callback import TrainerCallback, TrainerControl, TrainerState
import rljob_hf_bridge as bridge

rank, rendezvous, root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ["RANK"] = str(rank)
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=20))
request = f"{root}/request-{rank}"
open(request, "w").write("2026-12-05T13:00:00Z" if rank == 1 else "")
notice = bridge.Notice(request, f"{root}/out", "0")
if rank == 0:  # this rank's part of the step's end fails
    def finished(step, world_zero):
        raise OSError("the step's record failed")
    notice.finished = finished
callback = bridge.callback_class(TrainerCallback, notice)()
args = type("Args", (), {"device": "cpu"})()
state = TrainerState(global_step=5, max_steps=8, is_world_process_zero=rank == 0)
callback.on_train_begin(args, state, TrainerControl())
controls = []
for step in (5, 6):
    state.global_step = step
    control = callback.on_step_end(args, state, TrainerControl())
    controls.append([control.should_save, control.should_training_stop])
gradients = torch.ones(3)  # the Trainer's next collective: every rank must be at it
dist.all_reduce(gradients)
print(json.dumps({"controls": controls, "unavailable": notice.unavailable,
                  "gradients": gradients.tolist()}))
"""


def test_a_rank_whose_callback_fails_turns_save_on_notice_off_on_every_rank_and_none_waits(
    tmp_path,
):
    """Two ranks over gloo: rank 0's part of a step's end fails while rank 1 holds a request.
    Every rank takes part in the ranks' agreement all the same, and learns there that save on
    notice is off somewhere: none asks the Trainer to save or stop, and the Trainer's next
    collective meets every rank at it. Before, rank 0 skipped the agreement, and its next
    collective met rank 1's agreement: a hang, or a mismatch, of the user's training."""
    podside, contract_dir = Path(bridge.__file__).parent, Path(contract.__file__).parent.parent
    env = {"PYTHONPATH": f"{podside}:{contract_dir}", "PATH": "/usr/bin:/bin"}
    (tmp_path / "out").mkdir()
    command = [sys.executable, "-c", TWO_RANKS]
    ranks = [
        subprocess.Popen([*command, str(rank), str(tmp_path / "rdzv"), str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for rank in (0, 1)
    ]  # fmt: skip
    results = []
    for process in ranks:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    for rank, result in enumerate(results):
        assert result["controls"] == [[False, False], [False, False]], (rank, result)
        assert result["unavailable"], (rank, result)
        assert result["gradients"] == [2.0, 2.0, 2.0], (rank, result)
    assert "the step's record failed" in results[0]["unavailable"][0]
    assert "another rank" in results[1]["unavailable"][0]
