"""Run a gang's trainer container so that rljob can restart it in place, in the same pod.

The trainer container's first process when the job asks for in-place restarts
(spec.restartPolicy.inPlace), in front of torchrun or of the Ray node program (ray_node.py).
The operator mounts this file beside the rljob_contract package at /etc/rljob/launcher and
runs it by path:

    python3 /etc/rljob/launcher/rljob_in_place.py N WORD...

The first N words are the launcher's command (`torchrun ... train.py`, or `python3
ray_node.py head ... -- DRIVER`), the rest the pod's arguments, which a run the operator names
replaces. It uses the standard library only.

The pod's first container runs the command as given, as attempt RLJOB_ATTEMPT. A run the
operator stops by naming a newer attempt in the run file ends the container with
EXIT_RESTART_IN_PLACE; the container's restart rule has the kubelet start the pod's containers
again in the same pod (RestartAllContainers: no back-off, a fresh process tree), and this
program, finding in the pod-local state dir that it has run before, waits there for the
operator to name the next run. A run that ends by itself other than with 0 waits a few seconds
for that word (a peer was lost: the operator keeps this pod); without it the container ends
as the run did, its exit code and termination message the trainer's.

In a warm gang (ENV_WARM_RESTART "true": rljob's own trainer) the trainer reads the run file
itself: told of a newer attempt it saves with its gang, keeps its state (saying so in the state
dir) and takes the next run in its own process (rljob_trainer.warm), recording the attempt it
took. So this program stops it only where it neither holds nor ends within its grace period
after a newer attempt is named (a peer that died without a word can leave it waiting in a
collective); a trainer that ends, or is stopped, has the next run that the run file names
started here, in the same container, as a new process.

A guest never breaks the program it runs: without the run file or a writable state dir it runs
the command as given and ends as the command ends. When the pod is told to go (SIGTERM), the
signal reaches the command, and the container ends exactly as the command does.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import rljob_contract as contract  # mounted beside this file, which Python puts on sys.path
from rljob_contract.in_place import RunWord as Word
from rljob_contract.in_place import parse_word, run_environment, word_wait_seconds

POLL_SECONDS = 0.2
DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds
# What a stopped run's SIGTERM leaves of the grace period: the container still has to end and
# say why before the kubelet would have killed a pod that went meanwhile.
STOP_MARGIN_SECONDS = 3.0
STATE_FILE_NAME = contract.IN_PLACE_STARTED_FILE  # in the state dir: the attempt last started
# The signals the kubelet or a person sends PID 1 to end it; torchrun ends its workers on each.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
EXIT_USAGE = 2


class UsageError(ValueError):
    """The command line is not `N WORD...`."""


# --------------------------------------------------------------------------- the logic
@dataclass(frozen=True)
class Run:
    """One run of the command: its attempt, its arguments (None: the pod's own) and env."""

    attempt: int
    args: tuple[str, ...] | None = None
    env: Mapping[str, str | None] = field(default_factory=dict)


def parse_argv(argv: list[str]) -> tuple[int, list[str]]:
    """(N, WORD...) of `N WORD...`: the first N words are the launcher's command."""
    if len(argv) < 2:
        raise UsageError(f"usage: rljob_in_place.py N WORD...; got {argv!r}")
    try:
        count = int(argv[0])
    except ValueError:
        count = -1
    words = argv[1:]
    if not 0 < count <= len(words):
        raise UsageError(f"N must be a number from 1 to {len(words)}; got {argv[0]!r}")
    return count, words


def parse_attempt(text: str | None) -> int | None:
    try:
        attempt = int((text or "").strip())
    except ValueError:
        return None
    return attempt if attempt >= 0 else None


def waits_after(started: int | None, pod_attempt: int, word: Word | None) -> int | None:
    """The attempt that the next run must be newer than; None: run the pod's own now.

    A restarted container has run `started` already. The pod's first container runs its own,
    unless the run file already names a newer attempt: a run of it, or a stop, after which
    the pod's own would only be stopped again.
    """
    if started is not None:
        return max(started, pod_attempt)
    if word is not None and word.attempt > pod_attempt:
        return pod_attempt
    return None


def named_run(word: Word | None, after: int) -> Run | None:
    """The run the word names, if it is one and newer than `after`."""
    if word is None or word.args is None or word.attempt <= after:
        return None
    return Run(word.attempt, word.args, word.env)


def newer_attempt(word: Word | None, running: int) -> int | None:
    """The attempt that stops the run of `running`, run or stop alike."""
    return word.attempt if word is not None and word.attempt > running else None


def run_argv(command: list[str], pod_args: list[str], run: Run) -> list[str]:
    return [*command, *(pod_args if run.args is None else run.args)]


def run_env(base: Mapping[str, str], run: Run) -> dict[str, str]:
    return run_environment(base, run.attempt, run.env)


def stop_wait(grace: float) -> float:
    """How long a stopped run gets between SIGTERM and SIGKILL."""
    return max(1.0, grace - STOP_MARGIN_SECONDS)


def exit_code(returncode: int) -> int:
    """A container's exit code for the process's end: 128+S where signal S killed it."""
    return 128 - returncode if returncode < 0 else returncode


# --------------------------------------------------------------------------- the edges
def say(message: str) -> None:
    print(f"rljob: {message}", file=sys.stderr, flush=True)


class Forwarder:
    """Passes the signals this process gets to the running command, as if it had got them.

    Signals that come while no command runs wait for the next one; `received` is the last.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.child: subprocess.Popen | None = None
        self._pending: list[int] = []

    def install(self) -> None:
        for sig in FORWARDED:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received = signum
        self._pending.append(signum)
        self.flush()

    def start(self, argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.Popen:
        # Its own process group, so that nothing of a run outlives the run (end_group).
        self.child = subprocess.Popen(argv, env=env, start_new_session=True)
        self.flush()  # a signal that came while it started
        return self.child

    def flush(self) -> None:
        while self.child is not None and self.child.returncode is None:
            try:
                signum = self._pending.pop(0)
            except IndexError:  # none, or a handler inside this loop took it
                return
            try:
                os.kill(self.child.pid, signum)
            except ProcessLookupError:
                return


def end_group(child: subprocess.Popen) -> None:
    """SIGKILL what is left of a run's process group (a worker its launcher left behind)."""
    with contextlib.suppress(OSError):  # the group is gone
        os.killpg(child.pid, signal.SIGKILL)


def stop(child: subprocess.Popen, wait: float) -> int:
    """SIGTERM the run, as the kubelet would; SIGKILL its group after `wait` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGTERM)
    try:
        code = child.wait(wait)
    except subprocess.TimeoutExpired:
        end_group(child)
        code = child.wait()
    end_group(child)
    return exit_code(code)


class RunFile:
    """The run file, read afresh at each poll; content that is no word is said once."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._ignored: str | None = None

    def read(self) -> Word | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None  # not projected yet
        word = parse_word(text) if text.strip() else None
        if word is None and text.strip() and text != self._ignored:
            self._ignored = text
            say(f"ignoring the run file {self.path}: not a run or a stop ({text[:200]!r})")
        return word


class State:
    """The attempt this pod last started, kept in the pod-local state dir."""

    def __init__(self, folder: str) -> None:
        self.file = Path(folder) / STATE_FILE_NAME
        self.holding_file = Path(folder) / contract.IN_PLACE_HOLDING_FILE

    def writable(self) -> str | None:
        """Why the state cannot be kept here, or None."""
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            probe = self.file.with_name(f".{STATE_FILE_NAME}.probe")
            probe.write_text("", encoding="utf-8")
            probe.unlink()
        except OSError as exc:
            return f"its state dir {self.file.parent} is not writable ({exc})"
        return None

    def present(self) -> bool:
        return self.file.exists()

    def started(self) -> int | None:
        return self._read(self.file)

    def holding(self) -> int | None:
        """The attempt whose state a warm trainer holds, as it says (rljob_trainer.warm)."""
        return self._read(self.holding_file)

    @staticmethod
    def _read(path: Path) -> int | None:
        try:
            return parse_attempt(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            return None

    def record(self, attempt: int) -> None:
        """Atomically: a container that ends meanwhile leaves the old attempt or the new."""
        part = self.file.with_name(f".{STATE_FILE_NAME}.part")
        part.write_text(f"{attempt}\n", encoding="utf-8")
        os.replace(part, self.file)


def grace_seconds() -> float:
    try:
        grace = float(os.environ.get(contract.ENV_GRACE_SECONDS) or DEFAULT_GRACE_SECONDS)
    except ValueError:
        return DEFAULT_GRACE_SECONDS
    return grace if math.isfinite(grace) and grace > 0 else DEFAULT_GRACE_SECONDS


def off_because() -> str | None:
    """Why in-place restarts cannot work in this container, or None."""
    for name in (contract.ENV_RUN_FILE, contract.ENV_IN_PLACE_STATE_DIR, contract.ENV_ATTEMPT):
        if not os.environ.get(name):
            return f"{name} is not set"
    if parse_attempt(os.environ[contract.ENV_ATTEMPT]) is None:
        return f"{contract.ENV_ATTEMPT} is not an attempt: {os.environ[contract.ENV_ATTEMPT]!r}"
    return State(os.environ[contract.ENV_IN_PLACE_STATE_DIR]).writable()


def run_as_is(argv: list[str], signals: Forwarder, env: Mapping[str, str] | None = None) -> int:
    """As if the command were the container's first process: its end is the container's."""
    try:
        child = signals.start(argv, env)
    except OSError as exc:
        say(f"cannot run {argv[0]!r}: {exc}")
        return 127  # a shell's "command not found"
    return exit_code(child.wait())


def wait_for_run(run_file: RunFile, after: int, signals: Forwarder) -> Run | None:
    """Poll the run file until it names a run newer than `after`; None if told to go first."""
    say(f"waiting for the operator to name a run after attempt {after} in {run_file.path}")
    while signals.received is None:
        run = named_run(run_file.read(), after)
        if run is not None:
            return run
        time.sleep(POLL_SECONDS)
    return None


def warm_gang() -> bool:
    return os.environ.get(contract.ENV_WARM_RESTART, "").lower() == "true"


def supervise(
    child: subprocess.Popen, run: Run, run_file: RunFile, signals: Forwarder,
    warm: State | None = None,
) -> int:  # fmt: skip
    """Wait for the run; stop it when the run file names a newer attempt (in a warm gang,
    whose trainer reads the word itself and whose `warm` state says what it holds, only when
    it neither holds nor ends in time: `unanswered`). The exit code."""
    named_at: float | None = None
    while True:
        try:
            code = exit_code(child.wait(POLL_SECONDS))
            break
        except subprocess.TimeoutExpired:
            pass
        if signals.received is not None:
            continue  # the pod goes: the run ends as it would without this program
        if warm is not None:
            named_at = unanswered(run, run_file, warm, named_at)
            if named_at is not None and time.monotonic() - named_at >= stop_wait(grace_seconds()):
                say("a newer attempt is named, and the trainer neither holds its state nor has "
                    "ended within its grace period: stopping it")  # fmt: skip
                code = stop(child, STOP_MARGIN_SECONDS)
                break
            continue
        newer = newer_attempt(run_file.read(), run.attempt)
        if newer is not None:
            say(f"attempt {newer} is named: stopping the run of attempt {run.attempt}")
            code = stop(child, stop_wait(grace_seconds()))
            if signals.received is not None:
                return code
            return contract.EXIT_RESTART_IN_PLACE
    if signals.received is not None or code == 0:
        return code
    end_group(child)
    if warm is not None:
        return code
    return after_its_end(run, code, run_file, signals)


def unanswered(run: Run, run_file: RunFile, state: State, since: float | None) -> float | None:
    """Since when the run file has named an attempt newer than the one the warm trainer runs
    without the trainer holding its state; None while it does not, or it holds."""
    current = max(run.attempt, state.started() or run.attempt)
    if newer_attempt(run_file.read(), current) is None or state.holding() == current:
        return None
    return since if since is not None else time.monotonic()


def next_warm_run(after: int, run_file: RunFile, signals: Forwarder) -> Run | None:
    """In a warm gang, after a run that ended other than with 0: the run after attempt `after`
    (the newest the trainer ran) that the run file names, waited for a few seconds as
    `after_its_end` waits; once a newer attempt is named, until its run comes."""
    deadline = time.monotonic() + word_wait_seconds(os.environ)
    while signals.received is None:
        word = run_file.read()
        run = named_run(word, after)
        if run is not None:
            return run
        if newer_attempt(word, after) is None and time.monotonic() >= deadline:
            return None
        time.sleep(POLL_SECONDS)
    return None


def after_its_end(run: Run, code: int, run_file: RunFile, signals: Forwarder) -> int:
    """A run that ended by itself, other than with 0: restart in place if the operator names
    a newer attempt within the wait (a peer was lost, and this pod stays), else end as the
    run did (the pod's end is then the trainer's, its termination message as it wrote it)."""
    wait = word_wait_seconds(os.environ)
    say(f"the run of attempt {run.attempt} ended with {code}; waiting {wait:g} s for a newer one")
    deadline = time.monotonic() + wait
    while signals.received is None and time.monotonic() < deadline:
        if newer_attempt(run_file.read(), run.attempt) is not None:
            return contract.EXIT_RESTART_IN_PLACE
        time.sleep(POLL_SECONDS)
    return code


def run_in_place(count: int, words: list[str], signals: Forwarder) -> int:
    command, pod_args = words[:count], words[count:]
    pod_attempt = parse_attempt(os.environ[contract.ENV_ATTEMPT])
    assert pod_attempt is not None  # off_because checked it
    state = State(os.environ[contract.ENV_IN_PLACE_STATE_DIR])
    run_file = RunFile(os.environ[contract.ENV_RUN_FILE])
    started = None
    if state.present():  # unreadable, it still says that this pod has run before
        recorded = state.started()
        started = pod_attempt if recorded is None else recorded
    word = run_file.read()
    after = waits_after(started, pod_attempt, word)
    run = Run(pod_attempt) if after is None else named_run(word, after)
    if run is None:
        assert after is not None
        run = wait_for_run(run_file, after, signals)
        if run is None:
            assert signals.received is not None
            return 128 + signals.received  # told to go while nothing ran
    warm = warm_gang()
    while True:
        code = start_run(command, pod_args, run, state, run_file, signals, warm)
        if not warm or code == 0 or signals.received is not None:
            return code
        # The trainer records the attempts it takes in its own process.
        ran = max(run.attempt, state.started() or run.attempt)
        say(f"the run of attempt {ran} ended with {code}; waiting "
            f"{word_wait_seconds(os.environ):g} s for a newer one")  # fmt: skip
        following = next_warm_run(ran, run_file, signals)
        if following is None:
            return code
        run = following


def start_run(
    command: list[str],
    pod_args: list[str],
    run: Run,
    state: State,
    run_file: RunFile,
    signals: Forwarder,
    warm: bool,
) -> int:
    """Start `run` and supervise it; the container's exit code (in a warm gang, the run's)."""
    argv, env = run_argv(command, pod_args, run), run_env(os.environ, run)
    try:
        state.record(run.attempt)
    except OSError as exc:
        say(f"in-place restart is off: cannot record attempt {run.attempt} ({exc})")
        return run_as_is(argv, signals, env)
    shown = f": {shlex.join(run.args)}" if run.args is not None else ""
    changed = f" (env: {', '.join(sorted(run.env))})" if run.env else ""
    say(f"running attempt {run.attempt} in place{shown}{changed}")
    try:
        child = signals.start(argv, env)
    except OSError as exc:  # as a run that ended at once, as a shell's "command not found"
        say(f"cannot run {argv[0]!r}: {exc}")
        return 127 if warm else after_its_end(run, 127, run_file, signals)
    return supervise(child, run, run_file, signals, state if warm else None)


def main(argv: list[str]) -> int:
    signals = Forwarder()
    signals.install()  # first: PID 1 ignores a signal it has no handler for
    try:
        count, words = parse_argv(argv)
    except UsageError as exc:
        if not argv[1:]:
            say(str(exc))
            return EXIT_USAGE
        say(f"in-place restart is off: {exc}")
        return run_as_is(argv[1:], signals)
    why = off_because()
    if why is not None:
        say(f"in-place restart is off: {why}")
        return run_as_is(words, signals)
    return run_in_place(count, words, signals)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
