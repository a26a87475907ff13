"""The in-place restart wrapper (rljob_podside/rljob_in_place.py), run as a pod runs it: by path,
as its own process, over a small Python program that plays the trainer, with the run file, the
state dir and the termination log in a temporary folder."""

from __future__ import annotations

import json
import os
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
import rljob_contract as contract
from kube_steps import stays, wait_for
from rljob_podside import rljob_in_place as in_place

REPO = Path(__file__).resolve().parents[3]
PROGRAM = REPO / "operator" / "rljob_podside" / "rljob_in_place.py"

# The trainer: records its arguments and environment in ran-ATTEMPT.json once its SIGTERM and
# SIGINT handling is in place, then ends as its options say.
TRAINER = string.Template(r"""
import json, os, signal, subprocess, sys, time
opts = sys.argv[1:]
def opt(name, default=None):
    return opts[opts.index(name) + 1] if name in opts else default
out, attempt = os.environ["T_OUT"], os.environ.get($attempt)
def note(name, text=""):
    with open(os.path.join(out, name + ".part"), "w") as f:
        f.write(text)
    os.replace(os.path.join(out, name + ".part"), os.path.join(out, name))
def on_signal(signum, frame):
    note(f"got-{signum}-{attempt}")
    sys.exit(int(opt("--on-signal", "143")))
if "--ignore-term" in opts:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif "--die-on-term" not in opts:
    signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
if "--spawn" in opts:
    sleeper = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    note("grandchild", str(sleeper.pid))
if opt("--message"):
    with open(os.environ[$log], "w") as f:
        f.write(opt("--message"))
note(f"ran-{attempt}.json", json.dumps({"args": opts, "env": dict(os.environ)}))
if "--hold" in opts:
    while True:
        time.sleep(0.05)  # not a test wait: the trainer holds until it is signalled
while opt("--until") and not os.path.exists(opt("--until")):
    time.sleep(0.05)  # not a test wait: the trainer runs until the test says so
sys.exit(int(opt("--exit", "0")))
""").substitute(attempt=repr(contract.ENV_ATTEMPT), log=repr(contract.ENV_TERMINATION_LOG))
COMMAND = [sys.executable, "-c", TRAINER]  # the launcher's command: the wrapper's first N words
MESSAGE = contract.CHECKPOINTED_ON_REQUEST_MESSAGE


class Pod:
    """One trainer container's world: its run file, state dir and termination log."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.run_file, self.state_dir = root / "podinfo" / "run", root / "state"
        self.log, self.out = root / "termination-log", root / "out"
        self.run_file.parent.mkdir()
        self.run_file.write_text("")  # projected, empty until the operator annotates the pod
        self.out.mkdir()

    def env(self, attempt: int = 1, **changes: str | None) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "contract"),
            "T_OUT": str(self.out),
            contract.ENV_RUN_FILE: str(self.run_file),
            contract.ENV_IN_PLACE_STATE_DIR: str(self.state_dir),
            contract.ENV_ATTEMPT: str(attempt),
            contract.ENV_GRACE_SECONDS: "2",
            contract.ENV_IN_PLACE_WAIT: "1",
            contract.ENV_TERMINATION_LOG: str(self.log),
        }
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def start(self, *pod_args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        argv = [sys.executable, str(PROGRAM), str(len(COMMAND)), *COMMAND, *pod_args]
        return subprocess.Popen(argv, env=env or self.env(), cwd=self.root, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip

    def restarted_after(self, attempt: int) -> None:
        """As the pod is once its container has run `attempt` and been restarted in place."""
        self.state_dir.mkdir(exist_ok=True)
        (self.state_dir / in_place.STATE_FILE_NAME).write_text(f"{attempt}\n")

    def say(self, word: dict | str) -> None:
        """The operator's word, swapped in whole, as the kubelet updates a projected file."""
        part = self.run_file.with_name("run.part")
        part.write_text(word if isinstance(word, str) else json.dumps(word))
        os.replace(part, self.run_file)

    def ran(self, attempt: int) -> dict | None:
        path = self.out / f"ran-{attempt}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def runs(self) -> list[str]:
        return sorted(p.name for p in self.out.glob("ran-*.json"))

    def started(self) -> str:
        return (self.state_dir / in_place.STATE_FILE_NAME).read_text().strip()

    def message(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path)


def ended(process: subprocess.Popen, timeout: float = 10) -> tuple[int, str]:
    """The wrapper's exit code and what it said on stderr."""
    try:
        _, err = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.returncode, err


# --------------------------------------------------------------------------- the runs
def test_the_first_container_runs_the_pods_args_as_its_attempt_and_succeeds_as_the_run_does(pod):
    code, err = ended(pod.start("--exit", "0", "--lr", "0.1", env=pod.env(attempt=2)))

    assert code == 0
    ran = pod.ran(2)
    assert ran["args"] == ["--exit", "0", "--lr", "0.1"]
    assert ran["env"][contract.ENV_ATTEMPT] == "2"
    assert pod.started() == "2"
    assert pod.message() == ""
    assert "running attempt 2" in err


def test_a_run_that_ends_by_itself_ends_the_container_as_it_did_when_no_word_comes(pod):
    started = time.monotonic()
    code, err = ended(pod.start("--message", MESSAGE, "--exit", "75"))

    assert code == 75 and pod.message() == MESSAGE  # the trainer's end, as it wrote it
    assert time.monotonic() - started >= 1.0  # RLJOB_IN_PLACE_WAIT_SECONDS for the word
    assert "waiting 1 s for a newer one" in err


def test_a_run_that_ends_by_itself_restarts_in_place_when_a_newer_attempt_is_named_meanwhile(pod):
    process = pod.start("--message", MESSAGE, "--exit", "75",
                        env=pod.env(**{contract.ENV_IN_PLACE_WAIT: "30"}))  # fmt: skip
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)
    pod.say({"attempt": 2})  # a peer was lost: the operator keeps this pod
    code, _ = ended(process)

    assert code == contract.EXIT_RESTART_IN_PLACE == 117
    assert pod.message() == MESSAGE


def test_a_restarted_container_waits_for_a_newer_run_then_runs_its_args_and_env(pod):
    pod.restarted_after(3)
    pod.say({"attempt": 3, "args": ["--exit", "9"]})  # the run it has made already
    env = pod.env(attempt=2, T_GONE="yes", T_KEPT="kept")
    process = pod.start("--exit", "5", env=env)

    stays(lambda: process.poll() is None and not pod.runs(), 1, "waiting", interval=0.1)
    pod.say({"attempt": 4, "args": ["--exit", "0", "--resume"], "reason": "ignored",
             "env": {"T_ADDED": "added", "T_GONE": None}})  # fmt: skip
    code, err = ended(process)

    assert code == 0
    assert pod.runs() == ["ran-4.json"]
    ran = pod.ran(4)
    assert ran["args"] == ["--exit", "0", "--resume"]
    assert ran["env"][contract.ENV_ATTEMPT] == "4"
    assert ran["env"]["T_ADDED"] == "added" and ran["env"]["T_KEPT"] == "kept"
    assert "T_GONE" not in ran["env"]
    assert pod.started() == "4"
    assert "waiting" in err and "running attempt 4" in err


@pytest.mark.parametrize(
    ("word", "attempt", "args"),
    [
        ({"attempt": 3, "args": ["--named"]}, 3, ["--named"]),
        ({"attempt": 2, "args": ["--named"]}, 2, ["--own"]),  # the pod's own attempt
        ({"attempt": 1, "args": ["--named"]}, 2, ["--own"]),  # an older one
        ("{not json", 2, ["--own"]),
    ],
)
def test_the_first_container_runs_a_newer_named_run_at_once_and_else_its_own(
    pod, word, attempt, args
):
    pod.say(word)
    code, _ = ended(pod.start("--own", env=pod.env(attempt=2)))

    assert code == 0
    assert pod.runs() == [f"ran-{attempt}.json"]
    assert pod.ran(attempt)["args"] == args


def test_the_first_container_waits_where_a_newer_attempt_is_named_without_a_run(pod):
    pod.say({"attempt": 3})
    process = pod.start("--own", env=pod.env(attempt=2))

    stays(lambda: process.poll() is None and not pod.runs(), 0.6, "waiting", interval=0.1)
    pod.say({"attempt": 3, "args": ["--named"]})
    assert ended(process)[0] == 0
    assert pod.runs() == ["ran-3.json"]


def test_a_run_file_that_is_no_word_leaves_a_restarted_container_waiting(pod):
    pod.restarted_after(1)
    pod.say('{"attempt": "2", "args": []}')
    process = pod.start()

    stays(lambda: process.poll() is None and not pod.runs(), 0.6, "waiting", interval=0.1)
    pod.say("\x00 not json at all")
    stays(lambda: process.poll() is None and not pod.runs(), 0.6, "waiting", interval=0.1)
    pod.say({"attempt": 2, "args": []})
    code, err = ended(process)

    assert code == 0 and pod.runs() == ["ran-2.json"]
    assert err.count("ignoring the run file") == 2  # once per content, not once per poll


# --------------------------------------------------------------------------- stopping a run
@pytest.mark.parametrize("word", [{"attempt": 2}, {"attempt": 2, "args": ["--next"]}])
def test_a_newer_attempt_stops_the_run_with_sigterm_and_asks_for_a_restart_in_place(pod, word):
    process = pod.start("--hold", "--on-signal", "75")
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)

    pod.say(word)
    code, err = ended(process)

    assert code == contract.EXIT_RESTART_IN_PLACE
    assert (pod.out / f"got-{signal.SIGTERM.value}-1").exists()
    assert pod.message() == ""
    assert pod.runs() == ["ran-1.json"] and pod.started() == "1"
    assert "stopping the run of attempt 1" in err


def test_a_run_that_ignores_sigterm_is_killed_once_the_grace_period_is_spent(pod):
    process = pod.start("--hold", "--ignore-term")
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)

    asked = time.monotonic()
    pod.say({"attempt": 2})
    code, _ = ended(process)

    took = time.monotonic() - asked
    assert in_place.stop_wait(2) == 1.0
    assert 1.0 <= took < 4.0
    assert code == contract.EXIT_RESTART_IN_PLACE


def test_nothing_of_a_failed_run_outlives_it(pod):
    code, _ = ended(pod.start("--spawn", "--exit", "3"))
    assert code == 3
    sleeper = int((pod.out / "grandchild").read_text())

    def gone() -> bool:
        try:
            stat = Path(f"/proc/{sleeper}/stat").read_text()
        except OSError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] == "Z"  # killed, not reaped yet

    wait_for(gone, 5, "the run's leftover process killed", interval=0.05)


# --------------------------------------------------------------------------- the pod going
@pytest.mark.parametrize(
    ("sent", "trainer", "code"),
    [
        (signal.SIGTERM, ["--on-signal", "75"], 75),
        (signal.SIGTERM, ["--on-signal", "0"], 0),
        (signal.SIGTERM, ["--die-on-term"], 128 + signal.SIGTERM),  # killed by it
        (signal.SIGINT, ["--on-signal", "1"], 1),
    ],
)
def test_a_signal_to_the_wrapper_reaches_the_run_and_the_container_ends_as_the_run_does(
    pod, sent, trainer, code
):
    process = pod.start("--hold", "--message", MESSAGE, *trainer)
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)

    process.send_signal(sent)
    got, _ = ended(process)

    assert got == code
    assert pod.message() == MESSAGE  # nothing added
    if "--die-on-term" not in trainer:
        assert (pod.out / f"got-{sent.value}-1").exists()


def test_a_newer_attempt_named_after_sigterm_leaves_the_run_to_end_as_it_would(pod):
    process = pod.start("--hold", "--ignore-term", "--on-signal", "7")
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)

    process.send_signal(signal.SIGTERM)  # the pod goes; the trainer saves, taking its time
    pod.say({"attempt": 2})
    stays(lambda: process.poll() is None, 1.5, "the run left alone", interval=0.1)
    process.send_signal(signal.SIGINT)
    code, _ = ended(process)

    assert code == 7  # the trainer's SIGINT handler: neither stopped nor killed
    assert pod.message() == ""


def test_sigterm_while_waiting_ends_the_container_without_a_run(pod):
    pod.restarted_after(1)
    process = pod.start()
    assert "waiting" in process.stderr.readline()

    process.send_signal(signal.SIGTERM)
    code, _ = ended(process)

    assert code == 128 + signal.SIGTERM
    assert pod.runs() == [] and pod.message() == ""


# --------------------------------------------------------------------------- in-place off
@pytest.mark.parametrize(
    "why",
    [contract.ENV_RUN_FILE, contract.ENV_IN_PLACE_STATE_DIR, "an unwritable state dir"],
)
def test_without_what_in_place_restarts_need_the_command_runs_as_is_and_its_code_passes(pod, why):
    if why == "an unwritable state dir":
        (pod.root / "a-file").write_text("")
        env = pod.env(**{contract.ENV_IN_PLACE_STATE_DIR: str(pod.root / "a-file" / "state")})
    else:
        env = pod.env(**{why: None})
    pod.say({"attempt": 5, "args": ["--named"]})  # read by no one

    code, err = ended(pod.start("--message", MESSAGE, "--exit", "75", env=env))

    assert code == 75
    assert pod.message() == MESSAGE
    assert pod.runs() == ["ran-1.json"]
    assert pod.ran(1)["args"] == ["--message", MESSAGE, "--exit", "75"]
    assert not (pod.state_dir / in_place.STATE_FILE_NAME).exists()
    assert err.count("in-place restart is off") == 1
    assert (why if why != "an unwritable state dir" else "not writable") in err


def test_without_what_in_place_restarts_need_a_signal_still_reaches_the_command(pod):
    process = pod.start("--hold", "--on-signal", "75", env=pod.env(**{contract.ENV_RUN_FILE: None}))
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)

    process.send_signal(signal.SIGTERM)

    assert ended(process)[0] == 75


# --------------------------------------------------------------------------- the pure parts
@pytest.mark.parametrize(
    ("text", "word"),
    [
        ('{"attempt": 3}', in_place.Word(3)),
        ('{"attempt": 3, "args": []}', in_place.Word(3, ())),
        ('{"attempt": 3, "args": ["a"], "env": {"A": "1", "B": null}, "x": 1}',
         in_place.Word(3, ("a",), {"A": "1", "B": None})),
        ('{"attempt": 3, "args": null, "env": null}', in_place.Word(3)),
        ("", None),
        ("not json", None),
        ("[3]", None),
        ("[" * 100_000, None),
        ('{"args": ["a"]}', None),
        ('{"attempt": "3"}', None),
        ('{"attempt": true}', None),
        ('{"attempt": -1}', None),
        ('{"attempt": 3.5}', None),
        ('{"attempt": 3, "args": "a b"}', None),
        ('{"attempt": 3, "args": ["a", 1]}', None),
        ('{"attempt": 3, "args": [], "env": ["A"]}', None),
        ('{"attempt": 3, "args": [], "env": {"A": 1}}', None),
        ('{"attempt": 3, "args": [], "env": {"": "x"}}', None),
    ],
)  # fmt: skip
def test_the_run_files_word(text, word):
    assert in_place.parse_word(text) == word


@pytest.mark.parametrize(
    ("started", "word", "after", "run"),
    [
        (None, None, None, None),  # the pod's own, now
        (None, in_place.Word(2, ("a",)), None, None),
        (None, in_place.Word(3, ("a",)), 2, in_place.Run(3, ("a",))),
        (None, in_place.Word(3), 2, None),  # stop: wait
        (2, None, 2, None),
        (2, in_place.Word(2, ("a",)), 2, None),
        (2, in_place.Word(3), 2, None),
        (4, in_place.Word(5, ("a",), {"A": None}), 4, in_place.Run(5, ("a",), {"A": None})),
    ],
)
def test_what_a_container_runs_at_its_start(started, word, after, run):
    """For a pod created for attempt 2."""
    assert in_place.waits_after(started, 2, word) == after
    if after is not None:
        assert in_place.named_run(word, after) == run


def test_a_runs_command_and_environment():
    run = in_place.Run(4, ("--resume",), {"ADDED": "1", "GONE": None, "MISSING": None})
    base = {"GONE": "x", "KEPT": "y", contract.ENV_ATTEMPT: "2"}

    assert in_place.run_argv(["torchrun", "t.py"], ["--own"], run) == [
        "torchrun",
        "t.py",
        "--resume",
    ]
    assert in_place.run_argv(["torchrun"], ["--own"], in_place.Run(2)) == ["torchrun", "--own"]
    assert in_place.run_env(base, run) == {"ADDED": "1", "KEPT": "y", contract.ENV_ATTEMPT: "4"}
    assert base[contract.ENV_ATTEMPT] == "2"


@pytest.mark.parametrize(("grace", "wait"), [(30, 27), (4, 1), (2, 1), (0.5, 1)])
def test_a_stopped_run_gets_the_grace_period_less_a_margin_and_at_least_a_second(grace, wait):
    assert in_place.stop_wait(grace) == wait


@pytest.mark.parametrize("argv", [[], ["1"], ["x", "a"], ["0", "a"], ["3", "a", "b"]])
def test_a_malformed_command_line_is_refused(argv):
    with pytest.raises(in_place.UsageError):
        in_place.parse_argv(argv)


# --------------------------------------------------------------------------- a warm gang
def warm(pod: Pod, **changes: str | None) -> dict[str, str]:
    return pod.env(**{contract.ENV_WARM_RESTART: "true", **changes})


def test_in_a_warm_gang_a_newer_attempt_stops_no_trainer_that_holds_its_state(pod):
    process = pod.start("--hold", env=warm(pod))
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)
    (pod.state_dir / contract.IN_PLACE_HOLDING_FILE).write_text("1\n")  # as the trainer says
    pod.say({"attempt": 2})
    pod.say({"attempt": 2, "args": ["--exit", "0"]})

    stays(lambda: process.poll() is None, 2, "the trainer still runs", interval=0.1)  # > grace
    assert not list(pod.out.glob("got-*"))  # no SIGTERM, no SIGINT
    process.send_signal(signal.SIGTERM)  # the pod goes
    assert ended(process)[0] == 143


def test_in_a_warm_gang_a_trainer_that_neither_holds_nor_ends_is_stopped_and_run_again(pod):
    """A peer died without a word: the trainer waits in a collective, and never holds."""
    process = pod.start("--hold", env=warm(pod))
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)
    pod.say({"attempt": 2})
    stays(lambda: not list(pod.out.glob("got-*")), 0.6, "its grace period", interval=0.1)
    stopped = pod.out / f"got-{int(signal.SIGTERM)}-1"
    wait_for(stopped.exists, 5, "the trainer stopped (SIGTERM)", interval=0.05)
    pod.say({"attempt": 2, "args": ["--exit", "0"]})
    code, err = ended(process)

    assert code == 0
    assert pod.runs() == ["ran-1.json", "ran-2.json"]  # attempt 2 in the same container
    assert "neither holds its state nor has ended within its grace period" in err


def test_in_a_warm_gang_a_trainer_that_could_not_keep_its_state_gets_the_run_in_the_container(
    pod,
):
    process = pod.start("--message", MESSAGE, "--exit", "75",
                        env=warm(pod, **{contract.ENV_IN_PLACE_WAIT: "30"}))  # fmt: skip
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)
    pod.say({"attempt": 2})  # the pod stays; the run comes once the lost rank's pod is made
    stays(lambda: process.poll() is None and pod.runs() == ["ran-1.json"], 0.6, "waiting",
          interval=0.1)  # fmt: skip
    pod.say({"attempt": 2, "args": ["--exit", "0", "--resume"]})
    code, err = ended(process)

    assert code == 0  # no restart of the container: its restart count stays
    assert pod.runs() == ["ran-1.json", "ran-2.json"]
    assert pod.ran(2)["args"] == ["--exit", "0", "--resume"]
    assert pod.started() == "2"
    assert "running attempt 2 in place" in err


def test_in_a_warm_gang_a_run_the_trainer_took_itself_is_not_started_again(pod):
    go = pod.root / "go"
    process = pod.start("--until", str(go), "--exit", "1", env=warm(pod))
    wait_for(lambda: pod.ran(1), 10, "the run", interval=0.05)
    pod.say({"attempt": 2, "args": ["--exit", "0"]})
    pod.restarted_after(2)  # as the trainer records the run it took in its own process
    go.touch()  # it fails in attempt 2
    code, err = ended(process)

    assert code == 1  # its failure in attempt 2 ends the container as it ended
    assert pod.runs() == ["ran-1.json"]
    assert "the run of attempt 2 ended with 1" in err


def test_in_a_warm_gang_a_trainer_that_ends_without_a_word_ends_the_container(pod):
    code, _ = ended(pod.start("--message", MESSAGE, "--exit", "75", env=warm(pod)))
    assert code == 75 and pod.message() == MESSAGE
