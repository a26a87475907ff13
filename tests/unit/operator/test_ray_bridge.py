"""rljob's bridge into RLinf's and verl's loops, against the frameworks' own functions, and
the head's supervision of the driver after a notice (rljob_podside/rljob_ray_bridge.py, its
hooks rljob_rlinf_hooks.py and rljob_verl_hooks.py, and rljob_podside/ray_node.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import rljob_contract as contract
import rljob_ray_bridge as bridge  # as the pods import it (pytest's pythonpath): one copy
import rljob_rlinf_hooks as rlinf_hooks
import rljob_verl_hooks as verl_hooks
from builders import mounted_launcher
from kube_steps import stays, wait_for
from rljob_contract import progress
from rljob_contract.request import format_request
from rljob_podside import ray_node
from verl.utils.checkpoint.checkpoint_manager import should_save_ckpt_esi
from verl.utils.tracking import Tracking


@pytest.fixture
def loop(tmp_path: Path) -> bridge.Loop:
    return bridge.Loop(str(tmp_path / "notice"), str(tmp_path / "ckpt"), "3")


def give_notice(loop: bridge.Loop) -> None:
    Path(loop.notice_file).write_text("SIGTERM\n")


class Held(Exception):
    """The loop was held, as the bridge holds it until the driver is ended."""


def hold() -> None:
    raise Held


def record(loop: bridge.Loop) -> dict:
    return json.loads((loop.checkpoint_dir / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())


def test_verls_own_esi_rule_fires_on_notice_once_a_step_has_finished(loop, monkeypatch):
    monkeypatch.delenv(verl_hooks.VERL_EXPIRATION, raising=False)
    esi = verl_hooks.wrap_should_save_ckpt_esi(should_save_ckpt_esi, loop)
    assert esi(max_steps_duration=2.0, redundant_time=0) is False  # no notice
    give_notice(loop)
    assert esi(max_steps_duration=0, redundant_time=0) is False  # verl: no finished step yet
    assert loop.saving_on_notice is None
    assert esi(max_steps_duration=2.0, redundant_time=0) is True
    assert float(os.environ[verl_hooks.VERL_EXPIRATION]) > time.time()  # still ahead, as verl needs
    assert loop.saving_on_notice == -1


def test_verls_step_log_reports_each_step_and_the_save_on_notice(loop):
    log = verl_hooks.wrap_tracking_log(Tracking.log, loop, hold=hold)
    tracking = Tracking(project_name="rljob", experiment_name="unit", default_backend=[])
    log(tracking, {"timing_s/step": 2.0}, 13)
    assert record(loop)[progress.STEP] == 13 and record(loop)[progress.STATUS] == progress.RUNNING
    assert record(loop)[progress.ATTEMPT] == 3 and record(loop)[progress.STEP_SECONDS] == 2.0
    loop.saving_on_notice = -1  # verl's ESI check fired for step 14, which verl then saved
    with pytest.raises(Held):
        log(tracking, {"timing_s/step": 4.0}, 14)
    assert record(loop)[progress.STATUS] == progress.CHECKPOINTED_ON_REQUEST
    assert record(loop)[progress.STEP] == 14 and record(loop)[progress.STEP_SECONDS] == 3.0


def v1_trainer(step: int, total: int, save_freq: int, saved: list[int]):
    """verl's V1 sync trainer at `step`, with none of its set-up: what its own `step` reads,
    a rollout-and-update that does nothing, and a save that records its step."""
    from omegaconf import OmegaConf
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import PPOTrainerSync

    trainer = object.__new__(PPOTrainerSync)
    trainer.config = OmegaConf.create(
        {"data": {"train_batch_size": 2}, "trainer": {"save_freq": save_freq}}
    )
    trainer.parameter_sync_step = 1
    trainer.global_steps, trainer.total_training_steps = step, total
    trainer.prepare_step = dict
    trainer._step_once = lambda metrics, timing, size: KVBatchMeta(
        keys=["uid"], tags=[{}], partition_id="train"
    )
    trainer._save_checkpoint = lambda: saved.append(trainer.global_steps)
    return trainer


@pytest.mark.parametrize(
    ("step", "save_freq", "saves"),
    [
        (14, 10, [14]),  # between periodic saves: verl's own _save_checkpoint saves step 14
        (20, 10, []),  # verl's periodic save of step 20 comes next: not twice
        (30, 10, []),  # the last step: verl saves and ends the run itself
        (14, 0, []),  # checkpoints off
    ],
)
def test_verls_v1_trainer_saves_its_finished_step_on_notice_through_its_own_save(
    loop, step, save_freq, saves
):
    from verl.trainer.ppo.v1 import PPOTrainer

    stepped = verl_hooks.wrap_v1_step(PPOTrainer.step, loop, hold=hold)
    saved: list[int] = []
    trainer = v1_trainer(step, 30, save_freq, saved)
    assert stepped(trainer, {}, {}).keys == ["uid"]  # verl's own step ran
    assert saved == [] and loop.saving_on_notice is None  # no notice
    give_notice(loop)
    if saves:
        with pytest.raises(Held):  # reported as soon as the save returns
            stepped(trainer, {}, {})
    else:
        stepped(trainer, {}, {})
    assert saved == saves
    will_save = save_freq > 0 and step < 30
    assert loop.saving_on_notice == (step if will_save else None)
    stepped(trainer, {}, {})  # one save on notice only
    assert saved == saves


def test_verls_v1_save_on_notice_is_reported_as_soon_as_verls_save_returns(loop):
    """Before the step's validation and log: the rest of the step is time the grace lacks."""
    from verl.trainer.ppo.v1 import PPOTrainer

    stepped = verl_hooks.wrap_v1_step(PPOTrainer.step, loop, hold=hold)
    saved: list[int] = []
    give_notice(loop)
    with pytest.raises(Held):
        stepped(v1_trainer(14, 30, 10, saved), {}, {})
    assert saved == [14]
    assert (record(loop)[progress.STEP], record(loop)[progress.STATUS]) == (
        14,
        progress.CHECKPOINTED_ON_REQUEST,
    )


def test_a_notice_just_after_verls_periodic_save_trains_no_step_more_and_saves_nothing_twice(
    loop,
):
    """verl saved step 20 by its own rule; the notice comes during the step's validation or
    log: step 20 is the save on notice, reported before step 21 runs."""
    from verl.trainer.ppo.v1 import PPOTrainer

    stepped = verl_hooks.wrap_v1_step(PPOTrainer.step, loop, hold=hold)
    saves: list[int] = []
    trainer = v1_trainer(20, 30, 10, saves)
    save = verl_hooks.wrap_save_checkpoint(lambda self: saves.append(self.global_steps), loop,
                                       hold=hold)  # fmt: skip
    stepped(trainer, {}, {})
    save(trainer)  # verl's periodic save of step 20, as its loop makes it after the step
    trainer.global_steps = 21  # and its loop moves on
    give_notice(loop)
    ran: list[int] = []
    trainer._step_once = lambda metrics, timing, size: ran.append(trainer.global_steps)
    with pytest.raises(Held):
        stepped(trainer, {}, {})
    assert (saves, ran) == ([20], [])
    assert (record(loop)[progress.STEP], record(loop)[progress.STATUS]) == (
        20, progress.CHECKPOINTED_ON_REQUEST
    )  # fmt: skip
    # Step 21 finished since that save: the notice waits for step 22's end, and saves it.
    later = bridge.Loop(loop.notice_file, str(loop.checkpoint_dir), "3")
    later.last_saved, trainer.global_steps = 20, 22
    assert not verl_hooks.v1_saved_already(trainer, later)


def test_verls_asynchronous_save_is_never_reported_as_a_save_on_notice(loop):
    """With Megatron's async_save verl's `_save_checkpoint` returns before the shards are
    written: the V1 trainer is not asked to save on notice, the legacy trainer's ESI save is
    not reported, the loop is never held, and the record says why."""
    import types

    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import PPOTrainer

    give_notice(loop)
    saved: list[int] = []
    trainer = v1_trainer(14, 30, 10, saved)
    trainer.config = OmegaConf.merge(
        trainer.config, {"actor_rollout_ref": {"actor": {"checkpoint": {"async_save": True}}}}
    )
    verl_hooks.wrap_v1_step(PPOTrainer.step, loop, hold=hold)(trainer, {}, {})  # not held
    assert saved == [] and loop.saving_on_notice is None
    assert "async_save is on" in loop.why_unavailable(verl_hooks.VERL)

    legacy = bridge.Loop(loop.notice_file, str(loop.checkpoint_dir), "3")
    legacy.saving_on_notice = -1  # verl's ESI rule fired on notice
    esi_save = verl_hooks.wrap_save_checkpoint(lambda self: saved.append(20), legacy, hold=hold)
    esi_save(types.SimpleNamespace(global_steps=20, config=trainer.config))  # not held
    assert saved == [20]
    assert record(legacy)[progress.STATUS] == progress.RUNNING
    assert "async_save is on" in record(legacy)[progress.SAVE_ON_NOTICE_UNAVAILABLE]


@pytest.mark.parametrize("asked", [20, -1], ids=["v1-periodic-save", "legacy-esi-save"])
def test_verls_own_save_of_the_step_asked_for_reports_and_holds_when_it_returns(loop, asked):
    """verl's periodic save of the step the notice came in (V1), or the legacy trainer's ESI
    save: reported by the hook on verl's own `_save_checkpoint`, not at the step's log."""
    import types

    saves: list[int] = []
    saved = verl_hooks.wrap_save_checkpoint(lambda self: saves.append(self.global_steps), loop,
                                        hold=hold)  # fmt: skip
    trainer = types.SimpleNamespace(global_steps=20)
    saved(trainer)  # no notice: verl's periodic save, nothing more
    loop.saving_on_notice = asked
    with pytest.raises(Held):
        saved(trainer)
    assert saves == [20, 20]
    assert (record(loop)[progress.STEP], record(loop)[progress.STATUS]) == (
        20, progress.CHECKPOINTED_ON_REQUEST
    )  # fmt: skip


def test_rlinfs_own_timer_and_check_progress_save_and_stop_on_notice(loop):
    from rlinf.utils.runner_utils import check_progress
    from rlinf.utils.timers import Timer

    checked = rlinf_hooks.wrap_check_progress(check_progress, loop, hold=hold)
    timer_finished = rlinf_hooks.wrap_timer_is_finished(Timer.is_finished, loop)
    timer = Timer(None)
    timer.start_time()
    assert not timer_finished(timer)
    assert checked(13, 20, 0, 10, 1.0, run_time_exceeded=False)[1] is False  # not a save step
    assert record(loop)[progress.STEP] == 13
    give_notice(loop)
    assert timer_finished(timer)  # RLinf's runner now stops after this step
    _, save_model, is_train_end = checked(14, 20, 0, 10, 1.0, run_time_exceeded=True)
    assert (save_model, is_train_end, loop.saving_on_notice) == (True, False, 14)


def test_an_rlinf_runner_that_ignores_its_timer_saves_and_is_held_at_its_next_step(loop):
    from rlinf.utils.runner_utils import check_progress

    checked = rlinf_hooks.wrap_check_progress(check_progress, loop, hold=hold)
    give_notice(loop)
    assert checked(14, 20, 0, 10, 1.0, run_time_exceeded=False)[1] is True  # saves all the same
    with pytest.raises(Held):
        checked(15, 20, 0, 10, 1.0, run_time_exceeded=False)  # step 14's save is done by now
    assert record(loop)[progress.STATUS] == progress.CHECKPOINTED_ON_REQUEST
    assert record(loop)[progress.STEP] == 14


# RLinf's embodied runner, which passes run_time_exceeded=False and so never stops on its timer,
# driven through its own step end (`_maybe_eval_and_checkpoint`) with the bridge preloaded.
# Built without its __init__, which starts Ray workers: `Actor` stands in for its actor worker
# group, whose save the runner waits for.
EMBODIED_STEPS = """
import logging
import rljob_ray_bridge  # preloaded, as in every Ray worker
from omegaconf import OmegaConf
from rlinf.runners.embodied_runner import EmbodiedRunner

class Actor:
    def save_checkpoint(self, path, step):
        print("saved", step, flush=True)
        return self

    def wait(self):
        return None

runner = object.__new__(EmbodiedRunner)
runner.cfg = OmegaConf.create({"runner": {"val_check_interval": 0, "save_interval": 10,
                                          "logger": {"log_path": "logs", "experiment_name": "x"}}})
runner.max_steps, runner.actor, runner.logger = 20, Actor(), logging.getLogger("rlinf")
for step in (13, 14, 15):
    runner.global_step = step
    runner._maybe_eval_and_checkpoint(step)
    print("trained", step, flush=True)
"""


def held_after_rlinf_save(tmp_path: Path, shadow: Path) -> tuple[list[str], dict]:
    """Run EMBODIED_STEPS with a notice until the bridge reports the save on notice and holds
    the loop (as it does until the head ends the driver); the runner's output (without the
    bridge's) and the record then."""
    launcher = mounted_launcher(tmp_path / "launcher")
    env = bridge_env(tmp_path, launcher, notice=True)
    env["PYTHONPATH"] = f"{launcher}:{shadow}"
    process = subprocess.Popen([sys.executable, "-c", EMBODIED_STEPS], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    path = tmp_path / "ckpt" / progress.FRAMEWORK_PROGRESS_FILE_NAME

    def reported() -> bool:
        assert process.poll() is None, process.communicate()
        written = json.loads(path.read_text()) if path.is_file() else {}
        return written.get(progress.STATUS) == progress.CHECKPOINTED_ON_REQUEST

    try:
        wait_for(reported, 120, "the save on notice reported", interval=0.1)
        stays(lambda: process.poll() is None, 1, "the loop held")
    finally:
        process.kill()
    out, _ = process.communicate()
    said = [line for line in out.splitlines() if not line.startswith("rljob: ")]
    return said, json.loads(path.read_text())


def test_an_rlinf_runner_that_never_stops_on_its_timer_is_held_right_after_its_save(tmp_path):
    """The embodied, async and offline runners do not stop on their timer: held at their next
    check_progress they would train one more step after the save on notice."""
    said, written = held_after_rlinf_save(tmp_path, tmp_path / "none")
    assert said == ["saved 13"]  # and no further step
    assert written[progress.STATUS] == progress.CHECKPOINTED_ON_REQUEST
    assert written[progress.STEP] == 13
    assert progress.SAVE_ON_NOTICE_LATE not in written


def test_an_rlinf_runner_without_the_save_the_bridge_expects_saves_later_and_says_so(tmp_path):
    """Another version's runner names its save otherwise: the bridge's save on notice still
    works, held a step later, and the record says so for the job's SaveOnNotice condition."""
    shadow = shadowed(tmp_path, "rlinf", "rlinf.runners.embodied_runner", "_save_checkpoint(",
                      "_save_actor_checkpoint(")  # fmt: skip
    said, written = held_after_rlinf_save(tmp_path, shadow)
    assert said == ["saved 13", "trained 13"]
    assert written[progress.STATUS] == progress.CHECKPOINTED_ON_REQUEST
    assert written[progress.STEP] == 13
    late = written[progress.SAVE_ON_NOTICE_LATE]
    assert late.startswith(f"{bridge.version_of('rlinf')}: rlinf.runners.embodied_runner."
                           "EmbodiedRunner._save_checkpoint not found: ")  # fmt: skip
    assert progress.SAVE_ON_NOTICE_UNAVAILABLE not in written


def test_no_save_on_notice_without_save_interval_or_on_the_last_step(loop):
    from rlinf.utils.runner_utils import check_progress

    checked = rlinf_hooks.wrap_check_progress(check_progress, loop, hold=hold)
    give_notice(loop)
    assert checked(14, 20, 0, -1, 1.0, run_time_exceeded=False)[1] is False  # saving is off
    assert checked(20, 20, 0, 10, 1.0, run_time_exceeded=True)[2] is True  # the run's end
    assert loop.saving_on_notice is None


def bridge_env(tmp_path: Path, launcher: Path, notice: bool) -> dict[str, str]:
    if notice:
        (tmp_path / "notice").write_text("SIGTERM\n")
    return {
        **os.environ,
        "PYTHONPATH": str(launcher),
        contract.ENV_NOTICE_FILE: str(tmp_path / "notice"),
        contract.ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt"),
        contract.ENV_ATTEMPT: "2",
    }


def test_a_preloaded_bridge_hooks_the_frameworks_modules_when_they_are_imported(tmp_path):
    """As Ray's preload imports it in a worker process, before the framework's modules."""
    launcher = mounted_launcher(tmp_path / "launcher")
    code = textwrap.dedent("""
        import rljob_ray_bridge
        from rlinf.utils.runner_utils import check_progress
        from rlinf.utils.timers import Timer
        from verl.utils.tracking import Tracking
        from verl.trainer.ppo.v1 import PPOTrainerSync
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        print(check_progress.__qualname__, Timer.is_finished.__qualname__,
              Tracking.log.__qualname__, PPOTrainerSync.step.__qualname__,
              PPOTrainerSync._save_checkpoint.__qualname__,
              RayPPOTrainer._save_checkpoint.__qualname__)
    """)
    shown = subprocess.run([sys.executable, "-c", code], env=bridge_env(tmp_path, launcher, False),
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [
        "wrap_check_progress.<locals>.checked",
        "wrap_timer_is_finished.<locals>.finished",
        "wrap_tracking_log.<locals>.logged",
        "wrap_v1_step.<locals>.stepped",
        "wrap_save_checkpoint.<locals>.saved",
        "wrap_save_checkpoint.<locals>.saved",
    ]


RLINF_DRIVER = """
from rlinf.utils.runner_utils import check_progress
from rlinf.utils.timers import Timer

timer = Timer(None)
timer.start_time()
for step in range(1, 21):  # RLinf's reasoning runner's step end
    exceeded = timer.is_finished()
    _, save, end = check_progress(step, 20, 0, 10, 1.0, run_time_exceeded=exceeded)
    if save:
        print("saved", step)
    if end or exceeded:
        break
"""


@pytest.mark.parametrize(("notice", "code", "saved"), [(False, 0, ["10", "20"]), (True, 75, ["1"])])
def test_the_driver_run_through_the_bridge_stops_after_rlinfs_save_with_75(
    tmp_path, notice, code, saved
):
    launcher = mounted_launcher(tmp_path / "launcher")
    script = tmp_path / "main_grpo.py"
    script.write_text(RLINF_DRIVER)
    done = subprocess.run(
        [sys.executable, str(launcher / "ray_node.py"), "driver", "--", "-u", str(script)],
        env=bridge_env(tmp_path, launcher, notice), capture_output=True, text=True, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    assert [
        line.split()[1] for line in done.stdout.splitlines() if line.startswith("saved")
    ] == saved
    written = json.loads((tmp_path / "ckpt" / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())
    assert written[progress.ATTEMPT] == 2
    assert written[progress.STATUS] == (
        progress.CHECKPOINTED_ON_REQUEST if notice else progress.RUNNING
    )
    first, last = written[progress.FIRST_STEP_UNIX_TIME], written[progress.LAST_STEP_UNIX_TIME]
    assert first <= last if notice else first < last  # one step, or twenty
    seen = ray_node.bridge_report(str(tmp_path / "ckpt"), "2")
    assert progress.parse_trained(ray_node.trained_message(seen)) == (
        pytest.approx(first, abs=1e-3), pytest.approx(last, abs=1e-3),
    )  # fmt: skip
    assert ray_node.trained_message(ray_node.bridge_report(str(tmp_path / "ckpt"), "3")) is None
    # A record without the times (an older bridge, one whose framework's names it did not
    # find): the head says nothing more, and the driver's end is as it was.
    for key in (progress.FIRST_STEP_UNIX_TIME, progress.LAST_STEP_UNIX_TIME):
        written.pop(key)
    (tmp_path / "ckpt" / progress.FRAMEWORK_PROGRESS_FILE_NAME).write_text(json.dumps(written))
    assert ray_node.trained_message(ray_node.bridge_report(str(tmp_path / "ckpt"), "2")) is None


# --------------------------------------------------------------------------- the head
def driver(tmp_path: Path, seconds: float = 120) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"],
                            start_new_session=True)  # fmt: skip


def running(step: int, unavailable: str | None = None) -> ray_node.BridgeReport:
    return ray_node.BridgeReport(progress.RUNNING, step, unavailable)


def test_the_head_ends_the_driver_once_the_bridge_reports_the_save(tmp_path):
    notice = ray_node.Notice(tmp_path / "notice", 30, None)
    reports = iter([running(13), running(13)])
    process = driver(tmp_path)
    notice.give("SIGTERM")
    assert (tmp_path / "notice").read_text() == "SIGTERM\n"
    code, message = ray_node.supervise_driver(
        process, notice,
        lambda: next(reports, ray_node.BridgeReport(progress.CHECKPOINTED_ON_REQUEST, 14)),
    )  # fmt: skip
    assert code == contract.EXIT_CHECKPOINTED_ON_REQUEST and process.poll() is not None
    assert message.startswith(contract.CHECKPOINTED_ON_REQUEST_MESSAGE) and "step 14" in message


@pytest.mark.parametrize("steps", [True, False], ids=["a step", "no step"])
def test_the_head_turns_ready_once_the_bridge_reports_a_step_of_the_attempt(
    tmp_path, monkeypatch, steps
):
    """The head's readiness probe tests the marker: Ready once the framework's loop has
    finished a step of this attempt (the bridge's progress record says so), never before,
    and never for a driver that runs without a step."""
    marker = tmp_path / "trained"
    monkeypatch.setenv(contract.ENV_TRAINED_MARKER, str(marker))
    seen: list[bool] = []

    def report():
        seen.append(marker.exists())
        return running(1) if steps and len(seen) > 3 else None

    code, _ = ray_node.supervise_driver(
        driver(tmp_path, 1.5), ray_node.Notice(tmp_path / "notice", 30, None), report
    )

    assert code == 0 and seen[:4] == [False] * 4
    assert marker.exists() is steps


def stopped_at_once(tmp_path: Path, report, grace: float = 30) -> str:
    """SIGTERM to a head whose driver runs: the head ends the driver within seconds, with the
    driver's 143, not after the grace period. The head's termination message."""
    notice = ray_node.Notice(tmp_path / "notice", grace, None)
    process = driver(tmp_path)
    notice.give("SIGTERM")
    began = time.monotonic()
    code, message = ray_node.supervise_driver(process, notice, report)
    assert time.monotonic() - began < 10 and code == 128 + 15 and process.poll() is not None
    return message


def test_the_head_ends_a_driver_without_the_bridge_at_once(tmp_path):
    message = stopped_at_once(tmp_path, lambda: None)
    assert message.startswith(f"{contract.STOPPED_ON_NOTICE_MESSAGE} without a save: no step "
                              "of this attempt has finished")  # fmt: skip


def test_the_head_ends_the_driver_when_the_grace_period_is_nearly_spent(tmp_path):
    notice = ray_node.Notice(tmp_path / "notice", 2, None)
    process = driver(tmp_path)
    notice.give("SIGTERM")
    code, message = ray_node.supervise_driver(process, notice, lambda: running(13))
    assert process.poll() is not None and code != contract.EXIT_CHECKPOINTED_ON_REQUEST
    assert "did not save within the grace period (2 s); the last finished step is 13" in message


def test_the_head_ends_the_driver_before_the_node_goes_when_that_is_sooner(tmp_path):
    """A SIGTERM with a grace of 5 minutes, and then the request, which says that the node
    goes in about 3 s: the head waits for that, not for the grace period."""
    request = tmp_path / "checkpoint-request"
    notice = ray_node.Notice(tmp_path / "notice", 300, str(request))
    process = driver(tmp_path)
    notice.give("SIGTERM")
    goes = datetime.now(UTC) + timedelta(seconds=3)
    request.write_text(format_request(datetime.now(UTC), goes))
    began = time.monotonic()
    _, message = ray_node.supervise_driver(process, notice, lambda: running(13))
    assert time.monotonic() - began < 30 and process.poll() is not None
    assert "did not save within the deadline the checkpoint request gives" in message


def test_the_head_takes_a_rewritten_request_that_brings_the_deadline_nearer_never_further(
    tmp_path,
):
    """A warning asked with no deadline, then SIGTERM with a 5-minute grace; the operator then
    writes the request again, saying the node goes in about 3 s: the head's wait ends then.
    A later rewrite with a later time does not give the time back."""
    request = tmp_path / "checkpoint-request"
    notice = ray_node.Notice(tmp_path / "notice", 300, str(request))
    asked = datetime.now(UTC)
    request.write_text(format_request(asked))
    notice.poll_request()
    notice.give("SIGTERM")
    assert notice.requested and notice.seconds_left(0) > 290

    request.write_text(format_request(asked, asked + timedelta(seconds=3)))
    notice.poll_request()
    assert notice.seconds_left(0) < 4
    assert notice.limit().startswith("the deadline the checkpoint request gives")
    request.write_text(format_request(asked, asked + timedelta(seconds=200)))
    notice.poll_request()
    assert notice.seconds_left(0) < 4


def test_a_checkpoint_request_is_a_notice_and_sigterm_ends_the_node_only_after_it(tmp_path):
    request = tmp_path / "checkpoint-request"
    request.write_text("")
    notice = ray_node.Notice(tmp_path / "notice", 30, str(request))
    notice.poll_request()
    assert notice.given_at is None
    request.write_text("2026-12-02T12:00:00Z")
    notice.poll_request()
    assert notice.given_at is not None and not notice.terminated  # a request stops no raylet
    notice.give("SIGTERM")
    assert notice.terminated


def test_ray_and_the_driver_inherit_the_bridge():
    env = {"PYTHONPATH": "/workspace/RLinf", ray_node.ENV_RAY_PRELOAD: "mine"}
    ray_node.bridge_environment(env, "/etc/rljob/launcher", Path("/tmp/ray/rljob-notice"))
    ray_node.bridge_environment(env, "/etc/rljob/launcher", Path("/tmp/ray/rljob-notice"))
    assert env["PYTHONPATH"].split(":")[0] == "/etc/rljob/launcher"
    assert env["PYTHONPATH"].endswith(":/workspace/RLinf")
    assert env[ray_node.ENV_RAY_PRELOAD] == f"mine,{ray_node.BRIDGE_MODULE}"
    assert env[contract.ENV_NOTICE_FILE] == "/tmp/ray/rljob-notice"


def test_with_save_on_notice_off_the_loop_reports_steps_and_saves_nothing(tmp_path):
    from rlinf.utils.runner_utils import check_progress

    loop = bridge.Loop(str(tmp_path / "notice"), str(tmp_path / "ckpt"), "1", save_on_notice=False)
    (tmp_path / "notice").write_text("SIGTERM\n")
    checked = rlinf_hooks.wrap_check_progress(check_progress, loop, hold=hold)
    assert checked(14, 20, 0, 10, 1.0, run_time_exceeded=False)[1] is False
    assert loop.saving_on_notice is None and record(loop)[progress.STEP] == 14


def test_with_save_on_notice_off_verls_v1_trainer_saves_nothing_on_notice(tmp_path):
    from verl.trainer.ppo.v1 import PPOTrainer

    loop = bridge.Loop(str(tmp_path / "notice"), str(tmp_path / "ckpt"), "1", save_on_notice=False)
    (tmp_path / "notice").write_text("SIGTERM\n")
    stepped = verl_hooks.wrap_v1_step(PPOTrainer.step, loop, hold=hold)
    saved: list[int] = []
    trainer = v1_trainer(14, 30, 10, saved)
    assert stepped(trainer, {}, {}).keys == ["uid"]  # verl's own step ran
    assert saved == [] and loop.saving_on_notice is None


@pytest.mark.parametrize(("told", "saves"), [(None, True), ("true", True), ("false", False)])
def test_the_bridge_reads_spec_save_on_notice_from_its_pods_environment(tmp_path, told, saves):
    """RLJOB_SAVE_ON_NOTICE (launcher.podside.bridge_env), as a Ray worker imports the bridge."""
    launcher = mounted_launcher(tmp_path / "launcher")
    env = bridge_env(tmp_path, launcher, False)
    env.pop(contract.ENV_SAVE_ON_NOTICE, None)
    env.update({contract.ENV_SAVE_ON_NOTICE: told} if told else {})
    code = "import rljob_ray_bridge; print(rljob_ray_bridge.LOOP.notice_file is not None)"
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [str(saves)]


def test_with_save_on_notice_off_the_head_ends_the_driver_at_once(tmp_path):
    notice = ray_node.Notice(tmp_path / "notice", 30, None, save=False)
    process = driver(tmp_path)
    notice.give("SIGTERM")
    code, message = ray_node.supervise_driver(process, notice, lambda: running(13))
    assert process.poll() is not None and code == 128 + 15
    assert "spec.saveOnNotice is false; the last finished step is 13" in message


# --------------------------------------------------------------------------- another version
def shadowed(tmp_path: Path, package: str, module: str, old: str, new: str) -> Path:
    """A copy of the installed `package` with `old` replaced by `new` in `module`'s source,
    as another version of the framework would have it; to be put ahead on PYTHONPATH."""
    import importlib.util
    import shutil

    installed = Path(importlib.util.find_spec(package).origin).parent
    root = tmp_path / "shadow"
    shutil.copytree(installed, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    source = root / package / (module.replace(".", "/").removeprefix(f"{package}/") + ".py")
    text = source.read_text()
    assert old in text
    source.write_text(text.replace(old, new))
    return root


def run_with(tmp_path: Path, launcher: Path, shadow: Path, argv: list[str], notice: bool):
    env = bridge_env(tmp_path, launcher, notice)
    env["PYTHONPATH"] = f"{launcher}:{shadow}"
    env[contract.ENV_TERMINATION_LOG] = str(tmp_path / "termination-log")
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)  # fmt: skip


def test_verl_without_the_name_the_bridge_hooks_runs_as_it_is_and_the_record_says_why(tmp_path):
    """verl's V1 PPOTrainer.step renamed, as another version may have it: the user's imports
    work, no hook is installed on it, and each step's record names what is missing."""
    launcher = mounted_launcher(tmp_path / "launcher")
    shadow = shadowed(tmp_path, "verl", "verl.trainer.ppo.v1.trainer_base",
                      "    def step(self, metrics", "    def run_step(self, metrics")  # fmt: skip
    code = textwrap.dedent("""
        import rljob_ray_bridge  # preloaded, as in every Ray worker
        from verl.trainer.ppo.v1 import PPOTrainerSync
        from verl.utils.tracking import Tracking
        assert hasattr(PPOTrainerSync, "run_step") and not hasattr(PPOTrainerSync, "step")
        tracking = Tracking(project_name="rljob", experiment_name="unit", default_backend=[])
        tracking.log(data={"val/score": 1.0}, step=0)  # the validation before training
        tracking.log(data={"timing_s/step": 2.0}, step=1)
        print("trained")
    """)
    done = run_with(tmp_path, launcher, shadow, ["-c", code], notice=True)
    assert done.returncode == 0 and done.stdout.split() == ["trained"], done.stderr
    assert "verl.trainer.ppo.v1.trainer_base.PPOTrainer.step not found" in done.stderr
    written = json.loads((tmp_path / "ckpt" / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())
    assert written[progress.STEP] == 1  # the validation's log is no step
    why = written[progress.SAVE_ON_NOTICE_UNAVAILABLE]
    assert why.startswith(f"{bridge.version_of('verl')}: ") and "PPOTrainer.step not found" in why


def test_rlinf_without_the_parameter_the_bridge_reads_trains_to_its_end_on_notice(tmp_path):
    """check_progress's `save_interval` renamed: no hook on it, RLinf saves and stops by its own
    rules only, and a notice changes nothing: the run ends as it would without rljob."""
    launcher = mounted_launcher(tmp_path / "launcher")
    shadow = shadowed(tmp_path, "rlinf", "rlinf.utils.runner_utils", "save_interval",
                      "checkpoint_interval")  # fmt: skip
    script = tmp_path / "main_grpo.py"
    script.write_text(RLINF_DRIVER)
    done = run_with(tmp_path, launcher, shadow,
                    [str(launcher / "ray_node.py"), "driver", "--", str(script)], notice=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("saved")] == [
        "saved 10", "saved 20"
    ]  # fmt: skip
    assert "rlinf.utils.runner_utils.check_progress has no parameter save_interval" in done.stderr


def test_a_notice_never_ends_rlinf_as_a_success_when_it_saves_nothing(tmp_path):
    """runner.save_interval -1: RLinf saves nothing, so the notice cannot be a save. The
    driver stops with a disruption's message, never 0 after step 1 of 20."""
    launcher = mounted_launcher(tmp_path / "launcher")
    script = tmp_path / "main_grpo.py"
    script.write_text(RLINF_DRIVER.replace("(step, 20, 0, 10, 1.0,", "(step, 20, 0, -1, 1.0,"))
    done = run_with(tmp_path, launcher, tmp_path,
                    [str(launcher / "ray_node.py"), "driver", "--", str(script)], notice=True)  # fmt: skip
    assert done.returncode == 128 + 15, done.stderr
    said = (tmp_path / "termination-log").read_text()
    assert said.startswith(contract.STOPPED_ON_NOTICE_MESSAGE)
    assert "runner.save_interval is -1: RLinf saves no checkpoint" in said
    written = json.loads((tmp_path / "ckpt" / progress.FRAMEWORK_PROGRESS_FILE_NAME).read_text())
    assert written[progress.STEP] == 1 and written[progress.STATUS] == progress.RUNNING


def test_rlinfs_save_on_notice_runs_only_the_validation_its_settings_ask_for(loop):
    """Validation every 5 steps: the save on notice at step 13 runs none (RLinf's own time
    limit, which the bridge used to stand for, forces one)."""
    from rlinf.utils.runner_utils import check_progress
    from rlinf.utils.timers import Timer

    checked = rlinf_hooks.wrap_check_progress(check_progress, loop, hold=hold)
    timer_finished = rlinf_hooks.wrap_timer_is_finished(Timer.is_finished, loop)
    timer = Timer(None)
    timer.start_time()
    assert checked(12, 20, 5, 10, 1.0, run_time_exceeded=timer_finished(timer)) == (
        False, False, False
    )  # fmt: skip
    give_notice(loop)
    exceeded = timer_finished(timer)
    assert exceeded is True
    assert checked(13, 20, 5, 10, 1.0, run_time_exceeded=exceeded) == (False, True, False)
    assert loop.saving_on_notice == 13


def test_a_hook_that_finds_its_name_missing_installs_nothing_and_says_why(tmp_path):
    import types

    loop = bridge.Loop(str(tmp_path / "notice"), str(tmp_path / "ckpt"), "1")
    module = types.ModuleType("verl.trainer.ppo.v1.trainer_base")
    module.PPOTrainer = type("PPOTrainer", (), {})
    hook = next(h for h in verl_hooks.HOOKS if h.name == "PPOTrainer.step")
    hook.apply(module, loop)
    assert not hasattr(module.PPOTrainer, "step") and not loop.can_save(verl_hooks.VERL)
    assert loop.why_unavailable(verl_hooks.VERL).startswith(f"{bridge.version_of('verl')}: ")
    assert loop.can_save(rlinf_hooks.RLINF)  # the other framework's save on notice is untouched


# --------------------------------------------------------------------------- warnings
def test_a_checkpoint_request_alone_never_ends_the_driver(tmp_path):
    """A warning (a spot notice, a node's termination taint) on a gang whose loop has not
    reported a step yet: the driver runs on, to its own end, and nothing is counted."""
    request = tmp_path / "checkpoint-request"
    request.write_text("2026-12-04T10:00:00Z")
    notice = ray_node.Notice(tmp_path / "notice", 30, str(request))
    process = driver(tmp_path, seconds=3)
    code, message = ray_node.supervise_driver(process, notice, lambda: None)
    assert notice.given_at is not None and not notice.terminated
    assert (code, message) == (0, None)


def test_after_sigterm_the_head_ends_a_driver_that_cannot_save_at_once_and_says_why(tmp_path):
    why = "trainer.save_freq is -1: verl saves no checkpoint"
    message = stopped_at_once(tmp_path, lambda: running(3, why), grace=300)
    assert message == (f"{contract.STOPPED_ON_NOTICE_MESSAGE} without a save: {why}; the last "
                       "finished step is 3")  # fmt: skip


# --------------------------------------------------------------------------- a save that cannot fit
def test_verls_step_and_save_times_are_recorded_apart(loop):
    log = verl_hooks.wrap_tracking_log(Tracking.log, loop, hold=hold)
    tracking = Tracking(project_name="rljob", experiment_name="unit", default_backend=[])
    log(tracking, {"timing_s/step": 10.0}, 1)
    log(tracking, {"timing_s/step": 50.0, "timing_s/save_checkpoint": 40.0}, 2)  # saved
    written = record(loop)
    assert (written[progress.STEP_SECONDS], written[progress.SAVE_SECONDS]) == (10.0, 40.0)


def test_rlinfs_save_time_is_what_the_steps_after_a_save_took_more(loop, monkeypatch):
    from rlinf.utils.runner_utils import check_progress

    clock = iter([0.0, 2.0, 4.0, 11.0, 13.0])  # steps of 2 s; step 3 saved for 5 s after it
    monkeypatch.setattr(bridge.time, "monotonic", lambda: next(clock))
    checked = rlinf_hooks.wrap_check_progress(check_progress, loop, hold=hold)
    for step in range(1, 6):
        checked(step, 20, 0, 3, 1.0, run_time_exceeded=False)
    written = record(loop)
    assert (written[progress.STEP_SECONDS], written[progress.SAVE_SECONDS]) == (2.0, 5.0)


@pytest.mark.parametrize(
    ("step", "save", "ago", "left", "fits"),
    [
        (60, 30, 10, 100, True),  # 50 s of step and 30 s of save in 100 s
        (60, 30, 10, 70, False),
        (60, 30, 90, 40, True),  # the step should be done: only the save is left
        (None, 30, 10, 1, True),  # nothing known: the head waits, as before
    ],
)  # fmt: skip
def test_the_head_judges_from_the_measured_times_whether_a_save_can_fit(
    step, save, ago, left, fits
):
    now = 1_000_000.0
    seen = ray_node.BridgeReport(progress.RUNNING, 7, None, step, save, now - ago)
    why = ray_node.save_cannot_fit(seen, left, now)
    assert (why is None) == fits
    if not fits:
        assert why.startswith("the rest of the step and a save need about")


def test_after_sigterm_the_head_stops_holding_a_gang_whose_save_cannot_fit(tmp_path):
    """Steps of 2 minutes, saves of 1, a grace of 30 s: the head says so at once and stops
    the gang, instead of holding its nodes for the whole grace and falling back anyway."""
    seen = ray_node.BridgeReport(progress.RUNNING, 7, None, 120.0, 60.0, time.time() - 5)
    message = stopped_at_once(tmp_path, lambda: seen)
    assert message.startswith(f"{contract.STOPPED_ON_NOTICE_MESSAGE} without a save: the rest of "
                              "the step and a save need about 175 s")  # fmt: skip
    assert message.endswith("; the last finished step is 7")


# --------------------------------------------------------------------------- OpenRLHF's load
# A stand-in of OpenRLHF 0.11.2's module, laid out from its source: OpenRLHF itself imports
# vLLM, flash-attn and DeepSpeed at its modules' tops and does not import on this CPU-only
# machine. `load_ckpt` has 0.11.2's exact signature; where OpenRLHF hands `tag` to DeepSpeed's
# load_checkpoint (None: the folder `latest` names), this one says which folder it would load.
OPENRLHF_STRATEGY = """
import os


class DeepspeedStrategy:
    def load_ckpt(self, model, load_dir, tag=None, load_module_strict=True,
                  load_optimizer_states=True, load_lr_scheduler_states=True,
                  load_module_only=False):
        if tag is None:
            with open(os.path.join(load_dir, "latest")) as latest:
                tag = latest.read()
        return os.path.join(load_dir, tag), {"loaded": tag}
"""

OPENRLHF_RESUME = """
import rljob_ray_bridge  # preloaded, as in every Ray worker
import sys
from openrlhf.utils.deepspeed.deepspeed import DeepspeedStrategy
strategy = DeepspeedStrategy()
for role in ("_actor", "_critic"):
    print(strategy.load_ckpt(object(), sys.argv[1] + "/" + role)[1]["loaded"])
print(strategy.load_ckpt(object(), sys.argv[1] + "/_actor", "global_step2")[1]["loaded"])
"""


@pytest.mark.parametrize("critic_has_it", [True, False])
def test_openrlhf_loads_the_folder_rljob_chose_not_the_torn_one_latest_names(
    tmp_path, critic_has_it
):
    """A save cut short after DeepSpeed's rank 0 wrote `latest` (global_step6, torn): rljob
    resumes from global_step4, and the hook has OpenRLHF's own load take it, in the actor and
    the critic; a tag the caller gave stays; a role without rljob's folder loads as before."""
    launcher = mounted_launcher(tmp_path / "launcher")
    shadow = tmp_path / "shadow"
    for package in ("openrlhf", "openrlhf/utils", "openrlhf/utils/deepspeed"):
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text("")
    (shadow / "openrlhf/utils/deepspeed/deepspeed.py").write_text(OPENRLHF_STRATEGY)
    ckpt = tmp_path / "ckpt"
    for role in ("_actor", "_critic"):
        for step in (2, 4, 6):
            if role == "_actor" or critic_has_it or step != 4:
                (ckpt / role / f"global_step{step}").mkdir(parents=True)
        (ckpt / role / "latest").write_text("global_step6")
    env = bridge_env(tmp_path, launcher, notice=False)
    env["PYTHONPATH"] = f"{launcher}:{shadow}"
    env[contract.ENV_RESUME_DIR] = str(ckpt / "_actor" / "global_step4")
    done = subprocess.run([sys.executable, "-c", OPENRLHF_RESUME, str(ckpt)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = [line for line in done.stdout.splitlines() if not line.startswith("rljob:")]
    critic = "global_step4" if critic_has_it else "global_step6"
    assert loaded == ["global_step4", critic, "global_step2"]
    if not critic_has_it:
        assert "has no global_step4, the folder rljob chose" in done.stderr


def test_the_bridge_installs_the_hooks_shipped_beside_it_and_no_others(tmp_path, capsys):
    """A job ships its framework's hooks only (launcher.ray): the bridge installs what it finds
    beside it, and a hooks module it cannot import is left out with a word, not a crash."""
    verl_only = tmp_path / "verl"
    verl_only.mkdir()
    (verl_only / "rljob_verl_hooks.py").write_text("")  # imported by name, as in the pod
    (verl_only / "rljob_elsewhere_hooks.py").write_text("")  # not importable here
    assert {hook.framework for hook in bridge.shipped_hooks(verl_only)} == {"verl"}
    assert "rljob_elsewhere_hooks.py: not installed" in capsys.readouterr().err
    assert bridge.shipped_hooks(tmp_path) == ()
    shipped = {hook.framework for hook in bridge.shipped_hooks()}  # rljob_podside: a custom job's
    assert shipped == {"rlinf", "verl", "openrlhf"}
