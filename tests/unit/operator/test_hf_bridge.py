"""rljob's bridge into Hugging Face's Trainer (rljob_podside/rljob_hf_bridge.py), one call at a
time: its callback driven through transformers' own TrainerCallback, TrainerState and
TrainerControl (one process, so the ranks' agreement is this process's notice; two ranks over
gloo where the ranks' agreement is the point), what SIGTERM does in processes of its own, the
DataLoader workers it keeps out of torchrun's SIGTERM, and its rules as a guest. The whole run,
TRL's GRPOTrainer under torchrun, is tests/trainer/test_trl_resume.py's and
test_trl_save_on_notice.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import rljob_contract as contract
import rljob_hf_bridge as bridge
from rljob_contract import progress
from rljob_operator.api.reasons import Reason
from rljob_operator.api.spec import RestartPolicy
from rljob_operator.preemption.classify import Outcome, classify_facts
from rljob_operator.preemption.facts import PodFacts
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
    first = written[progress.FIRST_STEP_UNIX_TIME]
    assert written[progress.LAST_STEP_UNIX_TIME] == first  # the attempt's one step so far
    run.state.global_step = 6
    run.callback.on_step_end(ARGS, run.state, TrainerControl())
    written = record(run.record)
    assert written[progress.FIRST_STEP_UNIX_TIME] == first < written[progress.LAST_STEP_UNIX_TIME]


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
    """The notice comes after step 5's agreement, while the Trainer saves step 5: the ranks
    agree at step 6's start, where every rank saved step 5, and stop with that save."""
    control = TrainerControl(should_save=True)  # the Trainer's flow callback: step 5 saves
    control = run.callback.on_step_end(ARGS, run.state, control)
    assert not control.should_training_stop  # no notice yet
    run.notice.on_sigterm(signal.SIGTERM, None)  # torchrun passes the pod's SIGTERM on
    run.callback.on_save(ARGS, run.state, control)  # no collective here: see the two ranks'
    with pytest.raises(SystemExit) as stopped:
        run.callback.on_step_begin(ARGS, run.state, TrainerControl())
    assert stopped.value.code == contract.EXIT_CHECKPOINTED_ON_REQUEST
    written = record(run.record)
    assert (written["step"], written["status"]) == (5, progress.CHECKPOINTED_ON_REQUEST)


def test_a_save_the_trainer_skipped_after_the_notice_stops_as_a_preemption_not_a_failure(run):
    """save_strategy "best" can turn the save off after rljob asked for it (an evaluation
    that is no new best): the run stops all the same, at the epoch's end that the Trainer
    calls next, never as if it had finished, and its termination message says it stopped on
    notice: the operator counts a preemption (torchrun exits 1 and hides the code), not a
    failure, also where the notice was a request alone."""
    run.request.write_text("2026-12-04T21:00:00Z")
    control = run.callback.on_step_end(ARGS, run.state, TrainerControl())
    assert control.should_save and control.should_training_stop
    with pytest.raises(SystemExit) as stopped:
        run.callback.on_epoch_end(ARGS, run.state, control)  # no on_save: the save was skipped
    assert stopped.value.code == 128 + signal.SIGTERM
    message = run.termination.read_text()
    assert message.startswith(contract.STOPPED_ON_NOTICE_MESSAGE), message
    facts = PodFacts(name="trl-worker-0", node_name="node-a", phase="Failed", status_reason=None,
                     deleting=False, disruption_reason=None, exit_code=1,
                     termination_reason="Error", termination_message=message, node_known=True,
                     node_termination=None, node_not_ready_seconds=None)  # fmt: skip
    end = classify_facts(facts, RestartPolicy())
    assert (end.outcome, end.reason) == (Outcome.DISRUPTED, Reason.STOPPED_ON_NOTICE), end


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


def test_a_trainer_that_saves_weights_only_trains_as_it_is_and_the_record_says_why(
    tmp_path, monkeypatch
):
    """`save_only_model` writes no optimizer, scheduler or RNG state: a save on notice would
    claim a step no resume goes on from. The Trainer keeps rljob's callback (its steps are
    reported) without a save on notice, and the record says why."""
    from transformers import TrainingArguments

    notice = bridge.Notice(None, str(tmp_path), "0")
    monkeypatch.setattr(bridge, "hook_dataloader_workers", lambda notice: None)
    monkeypatch.setattr(notice, "take_sigterm", lambda: None)  # this pytest process's own

    class Trainer:  # the Trainer's two names the bridge uses, on the real TrainingArguments
        def __init__(self, args):
            self.args, self.callbacks = args, []

        def add_callback(self, callback):
            self.callbacks.append(callback)

    Trainer.__init__ = bridge.wrap_trainer_init(Trainer.__init__, notice)
    trainer = Trainer(TrainingArguments(output_dir=str(tmp_path), save_only_model=True))

    assert len(trainer.callbacks) == 1
    written = record(tmp_path / progress.FRAMEWORK_PROGRESS_FILE_NAME)
    assert "save_only_model is set" in written[progress.SAVE_ON_NOTICE_UNAVAILABLE]


def test_with_save_on_notice_off_a_notice_saves_nothing_and_the_steps_are_reported(
    tmp_path, monkeypatch
):
    """spec.saveOnNotice false (RLJOB_SAVE_ON_NOTICE=false): the Trainer keeps rljob's callback,
    which reports the steps, a request saves nothing, and the record says why."""
    notice = bridge.Notice(str(tmp_path / "request"), str(tmp_path), "0", save_on_notice=False)
    monkeypatch.setattr(bridge, "hook_dataloader_workers", lambda notice: None)
    monkeypatch.setattr(notice, "take_sigterm", lambda: None)  # this pytest process's own

    class Trainer:  # the Trainer's two names the bridge uses
        def __init__(self):
            self.args, self.callbacks = SimpleNamespace(), []

        def add_callback(self, callback):
            self.callbacks.append(callback)

    Trainer.__init__ = bridge.wrap_trainer_init(Trainer.__init__, notice)
    (callback,) = Trainer().callbacks
    (tmp_path / "request").write_text("2026-12-04T21:00:00Z")
    state = TrainerState(global_step=5, max_steps=8)
    callback.on_train_begin(ARGS, state, TrainerControl())
    control = callback.on_step_end(ARGS, state, TrainerControl())
    assert not control.should_save and not control.should_training_stop
    written = record(tmp_path / progress.FRAMEWORK_PROGRESS_FILE_NAME)
    assert written["step"] == 5
    assert written[progress.SAVE_ON_NOTICE_UNAVAILABLE] == bridge.SAVE_ON_NOTICE_OFF


@pytest.mark.parametrize(("told", "saves"), [(None, True), ("true", True), ("false", False)])
def test_the_bridge_reads_spec_save_on_notice_from_its_pods_environment(told, saves):
    """RLJOB_SAVE_ON_NOTICE (launcher.podside.bridge_env), as a torchrun worker imports it."""
    env = {k: v for k, v in os.environ.items() if k != contract.ENV_SAVE_ON_NOTICE}
    shipped = (Path(bridge.__file__).parent, Path(contract.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(map(str, shipped))  # as mounted: side by side
    env.update({contract.ENV_SAVE_ON_NOTICE: told} if told else {})
    code = "import rljob_hf_bridge; print(rljob_hf_bridge.NOTICE.save_on_notice)"
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [str(saves)]


def test_the_first_finished_step_of_the_container_marks_its_pod_trained(run, tmp_path, monkeypatch):
    """The pod's readiness probe tests the marker: Ready only once a step of this container's
    attempt has finished, never at the Trainer's start."""
    marker = tmp_path / "trained"
    monkeypatch.setenv(contract.ENV_TRAINED_MARKER, str(marker))
    run.callback.on_train_begin(ARGS, run.state, TrainerControl())
    assert not marker.exists()

    run.callback.on_step_end(ARGS, run.state, TrainerControl())

    assert marker.exists()


def test_a_marker_that_cannot_be_written_leaves_the_trainers_step_as_it_is(
    run, tmp_path, monkeypatch
):
    """A read-only or missing /tmp: the pod stays not Ready, the user's step goes on as it is."""
    monkeypatch.setenv(contract.ENV_TRAINED_MARKER, str(tmp_path / "missing" / "trained"))

    control = run.callback.on_step_end(ARGS, run.state, TrainerControl())

    assert not control.should_save and not control.should_training_stop
    assert not (tmp_path / "missing").exists() and not run.notice.unavailable
    assert record(run.record)["step"] == 5


SIGTERM_CASES = """
import json, os, signal, sys, traceback
from types import SimpleNamespace
from transformers.trainer_callback import TrainerCallback, TrainerControl, TrainerState
import rljob_hf_bridge as bridge

ARGS = SimpleNamespace(device="cpu")


def sigterm():  # as torchrun passes the pod's on
    os.kill(os.getpid(), signal.SIGTERM)


def case(name):
    notice = bridge.Notice(None, None, None)
    callback = bridge.callback_class(TrainerCallback, notice)()
    state = TrainerState(global_step=5, max_steps=8)
    notice.take_sigterm()  # as the Trainer's __init__ under the bridge
    if name != "before the Trainer trains":
        callback.on_train_begin(ARGS, state, TrainerControl())
    if name == "while the Trainer trains":
        sigterm()
        assert notice.signalled == "SIGTERM", "no notice"
    elif name == "with save on notice off":
        notice.cannot_save("transformers", "a test's reason")
        sigterm()
    elif name == "held, then save on notice off":
        sigterm()
        notice.cannot_save("transformers", "a test's reason")
    elif name == "after the last step's agreement":
        state.global_step = 8  # the flow callback stops the run at max_steps
        callback.on_step_end(ARGS, state, TrainerControl(should_training_stop=True))
        sigterm()  # during the Trainer's last save, say
    elif name == "held until the Trainer ends":
        sigterm()
        callback.on_train_end(ARGS, state, TrainerControl())
    elif name == "after the Trainer trained":
        callback.on_train_end(ARGS, state, TrainerControl())
        sigterm()  # in save_model() or push_to_hub() after train()
    else:
        sigterm()


ends = {}
for name in sys.argv[1:]:
    child = os.fork()  # one interpreter's imports for every case
    if child == 0:
        try:
            case(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    ends[name] = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
                  if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}")
print(json.dumps(ends))
"""


def test_a_sigterm_the_bridge_does_not_act_on_ends_the_process_as_it_would_have_without_it():
    """SIGTERM is a notice only while the bridge can act on it: a Trainer trains, save on
    notice is on, and the ranks will agree again. Otherwise it ends the process as it would
    have without rljob (killed by SIGTERM, which torchrun reports), where it comes and where
    the bridge held it until it knew: a run whose save on notice is off, or past its last
    agreement, no longer trains on until torchrun's SIGKILL, and nothing after train()
    (save_model, push_to_hub) runs into it."""
    cases = {
        "before the Trainer trains": "killed by SIGTERM",
        "while the Trainer trains": "exit 0",  # held as the notice
        "with save on notice off": "killed by SIGTERM",
        "held, then save on notice off": "killed by SIGTERM",
        "after the last step's agreement": "killed by SIGTERM",
        "held until the Trainer ends": "killed by SIGTERM",
        "after the Trainer trained": "killed by SIGTERM",
    }
    podside = Path(bridge.__file__).parent
    done = subprocess.run([sys.executable, "-c", SIGTERM_CASES, *cases], capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(podside),
                          "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == cases, done.stderr[-3000:]


WORKER_GROUPS = """
import os
import torch
from torch.utils.data import DataLoader, Dataset
import rljob_hf_bridge as bridge


class Groups(Dataset):  # what each DataLoader worker sees of itself
    def __len__(self):
        return 2

    def __getitem__(self, index):
        return torch.tensor([os.getpid(), os.getpgid(0)])


if __name__ == "__main__":
    notice = bridge.Notice(None, None, None)
    bridge.hook_dataloader_workers(notice)  # as the Trainer's __init__ under the bridge
    assert notice.workers_unhooked is None, notice.workers_unhooked
    for method in ("fork", "spawn"):
        loader = DataLoader(Groups(), batch_size=None, num_workers=1,
                            multiprocessing_context=method)
        for pid, group in (item.tolist() for item in loader):
            mine = os.getpgid(0)
            print(method, "its own" if group == pid else "torchrun's" if group == mine else group)
"""


def test_forked_dataloader_workers_leave_torchruns_process_group_and_others_run_as_they_are(
    tmp_path,
):
    """torchrun stops a worker with os.killpg, and torch's DataLoader workers die of a
    SIGTERM their parent did not send: under the bridge a forked worker (the Trainer's, on
    Linux before Python 3.14) leaves the group as it starts. A spawned one unpickles torch's
    own worker loop, the bridge's wrapper bearing its names, and works as without the bridge
    (the Trainer's start then says save on notice is off: the next test)."""
    program = tmp_path / "workers.py"
    program.write_text(WORKER_GROUPS)
    podside = Path(bridge.__file__).parent
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          timeout=120, start_new_session=True,  # a group leader, as under torchrun
                          env={"PYTHONPATH": str(podside), "PATH": "/usr/bin:/bin",
                               "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:4] == ["fork its own"] * 2 + ["spawn torchrun's"] * 2, (
        done.stdout, done.stderr[-3000:])  # fmt: skip


def test_dataloader_workers_out_of_the_bridges_reach_turn_save_on_notice_off(run):
    """Where torch's worker loop is not as the bridge expects, a Trainer with DataLoader
    workers cannot save on SIGTERM: the record says so when it starts training (and SIGTERM
    then ends the process as without rljob); without workers it does not matter."""
    run.notice.workers_unhooked = "torch 9.9: torch.utils.data._utils.worker._worker_loop not found"
    run.callback.on_train_begin(SimpleNamespace(device="cpu", dataloader_num_workers=0),
                                run.state, TrainerControl())  # fmt: skip
    assert not run.notice.unavailable
    run.callback.on_train_begin(SimpleNamespace(device="cpu", dataloader_num_workers=2),
                                run.state, TrainerControl())  # fmt: skip
    written = record(run.record)
    assert "dataloader_num_workers 2: torch 9.9" in written[progress.SAVE_ON_NOTICE_UNAVAILABLE]


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
dist.destroy_process_group()  # not at the interpreter's exit, where gloo may abort
"""


def test_a_rank_whose_callback_fails_turns_save_on_notice_off_on_every_rank_and_none_waits(
    tmp_path,
):
    """Two ranks over gloo: rank 0's part of a step's end fails while rank 1 holds a request.
    Every rank takes part in the ranks' agreement all the same, and learns there that save on
    notice is off somewhere: none asks the Trainer to save or stop, and the Trainer's next
    collective meets every rank at it. Before, rank 0 skipped the agreement, and its next
    collective met rank 1's agreement: a hang, or a mismatch, of the user's training."""
    (tmp_path / "out").mkdir()
    results = two_ranks(TWO_RANKS, tmp_path)
    for rank, result in enumerate(results):
        assert result["controls"] == [[False, False], [False, False]], (rank, result)
        assert result["unavailable"], (rank, result)
        assert result["gradients"] == [2.0, 2.0, 2.0], (rank, result)
    assert "the step's record failed" in results[0]["unavailable"][0]
    assert "another rank" in results[1]["unavailable"][0]


def two_ranks(program: str, root: Path) -> list[dict]:
    """Run `program` as ranks 0 and 1 of a gloo group; what each printed last, as JSON."""
    podside, contract_dir = Path(bridge.__file__).parent, Path(contract.__file__).parent.parent
    env = {"PYTHONPATH": f"{podside}:{contract_dir}", "PATH": "/usr/bin:/bin",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    ranks = [
        subprocess.Popen([sys.executable, "-c", program, str(rank), str(root / "rdzv"),
                          str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
        for rank in (0, 1)
    ]  # fmt: skip
    results = []
    for process in ranks:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


SAVES_APART = """
import datetime, json, os, sys
import torch
import torch.distributed as dist
from transformers.trainer_callback import TrainerCallback, TrainerControl, TrainerState
import rljob_hf_bridge as bridge

rank, rendezvous, root = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=15))
args = type("Args", (), {"device": "cpu"})()
gradients = []


class Trainer:  # what the bridge uses of a Trainer: its public add_callback
    def __init__(self):
        self.callbacks = []

    def add_callback(self, callback):
        self.callbacks.append(callback)


def train(name, saves, notice_after, failed_before=False):
    # A Trainer's steps 5 to 7 on this rank, its callbacks called as the Trainer calls them:
    # saves(step) is whether this rank's Trainer saves the step (a user's callback may set
    # should_save on one rank only); rank 1 gets the operator's request at step notice_after's
    # end, while that step is saved.
    request = f"{root}/{name}-request-{rank}"
    open(request, "w").write("")
    notice = bridge.Notice(request, f"{root}/{name}", "0")
    notice.workers_hook_tried = True  # no DataLoader here
    if failed_before and rank == 0:  # rljob's callback failed here in an earlier Trainer,
        notice.cannot_save("transformers", "an earlier Trainer's failure")  # after its last agreement
    init = Trainer.__init__
    Trainer.__init__ = bridge.wrap_trainer_init(init, notice)
    callbacks = Trainer().callbacks
    Trainer.__init__ = init
    state = TrainerState(global_step=4, max_steps=8, is_world_process_zero=rank == 0)

    def call(event, control):
        for callback in callbacks:
            control = getattr(callback, event)(args, state, control) or control
        return control

    call("on_train_begin", TrainerControl())
    try:
        while state.global_step < 7:
            call("on_step_begin", TrainerControl())
            step_gradients = torch.ones(3)  # DDP's all_reduce of the step's gradients
            dist.all_reduce(step_gradients)
            gradients.append(step_gradients.tolist())
            state.global_step += 1
            control = call("on_step_end", TrainerControl(should_save=saves(state.global_step)))
            if rank == 1 and state.global_step == notice_after:
                open(request, "w").write("2026-12-06T10:00:00Z")
            if control.should_save:  # the Trainer's _save_checkpoint, then on_save
                control = call("on_save", control)
            if control.should_training_stop:
                break
    except SystemExit as stop:
        return {"exit": stop.code, "step": state.global_step, "off": bool(notice.unavailable)}
    return {"exit": None, "step": state.global_step, "off": bool(notice.unavailable)}


ends = {
    "rank 0 saves alone": train("alone", lambda step: rank == 0 and step == 5, notice_after=5),
    "every rank saves": train("every", lambda step: step == 5, notice_after=5),
    "after a rank's failure": train("failed", lambda step: False, notice_after=5,
                                    failed_before=True),
}
print(json.dumps({"ends": ends, "gradients": gradients}))
dist.destroy_process_group()
"""


def test_ranks_agree_in_step_where_one_rank_saves_alone_or_failed_in_an_earlier_trainer(
    tmp_path,
):
    """Two ranks over gloo, the callbacks called as the Trainer calls them, with DDP's
    gradient all_reduce in every step. Rank 0 saves step 5 alone (a user's callback sets
    should_save on rank 0 only, valid under plain DDP) and rank 1 gets a request while it
    does: on_save holds no collective, the ranks agree at step 6's start that not every rank
    saved step 5, and stop with a save of step 6 on every rank. Where every rank saved step 5,
    they stop with it at step 6's start, no step more. A Trainer made after rank 0's callback
    failed in an earlier one gets the callback on every rank, whose first agreement turns save
    on notice off on both. Every gradient all_reduce meets the other rank's. Before, rank 0's
    on_save asked rank 1, whose next collective was the gradients': a mismatch, or a hang;
    and the later Trainer got no callback on rank 0, the same."""
    results = two_ranks(SAVES_APART, tmp_path)
    for rank, result in enumerate(results):
        assert result["ends"] == {
            "rank 0 saves alone": {"exit": contract.EXIT_CHECKPOINTED_ON_REQUEST, "step": 6,
                                   "off": False},
            "every rank saves": {"exit": contract.EXIT_CHECKPOINTED_ON_REQUEST, "step": 5,
                                 "off": False},
            "after a rank's failure": {"exit": None, "step": 7, "off": True},
        }, (rank, result)  # fmt: skip
        assert result["gradients"] == [[2.0, 2.0, 2.0]] * 6, (rank, result)
    for name, step in (("alone", 6), ("every", 5)):
        written = record(tmp_path / name / progress.FRAMEWORK_PROGRESS_FILE_NAME)
        assert (written["step"], written["status"]) == (step, progress.CHECKPOINTED_ON_REQUEST)
