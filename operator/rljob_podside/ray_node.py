"""Start this pod's Ray node; on the head, wait for the whole gang, then run the driver.

This file runs inside the user's image, which has Python and Ray but not rljob. The operator
mounts it, with rljob_ray_bridge.py (and the framework's hooks) and the rljob_contract
package, from the job's launcher ConfigMap at /etc/rljob/launcher, and runs it by path:

    python3 /etc/rljob/launcher/ray_node.py head [ray start flags...] -- DRIVER...
    python3 /etc/rljob/launcher/ray_node.py worker [ray start flags...]
    python3 /etc/rljob/launcher/ray_node.py driver -- [-u] (-m MODULE | SCRIPT) ARGS...

It uses the standard library only and finds `ray` on the image's PATH. The operator
renders the flags and sets the RLJOB_RAY_* variables below (launcher.ray).

It stays the container's first process, so that a notice reaches it and not Ray: SIGTERM,
or rljob's checkpoint request turning non-empty. On notice it writes the pod's notice file,
which rljob_ray_bridge reads inside the framework's loop (in the driver for RLinf, in the
Ray worker that runs verl's trainer) to make the framework save through its own path.
Meanwhile the head keeps the driver running until the bridge reports the save done (exit 75
and rljob's "checkpointed on request" message) or the grace period is nearly spent, and a
worker keeps its raylet, which the save needs, until the head is gone or the same deadline.

Failures that the operator should report are written to the termination message, so that
`kubectl describe` and the job's status say which address could not be reached, or how many
Ray nodes joined, instead of a bare exit code.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path

import rljob_contract as contract  # mounted beside this file, which Python puts on sys.path
from rljob_contract import progress
from rljob_contract.request import RequestFile
from rljob_contract.untrusted import positive_number

# Ray imports these modules in every worker process it starts (its `preload_python_modules`).
ENV_RAY_PRELOAD = "RAY_preload_python_modules"
BRIDGE_MODULE = "rljob_ray_bridge"
# How often a node asks again whether the head listens, or the head whether every node
# joined: each wait is on a recovery's critical path, and each question is one cheap call.
RETRY_SECONDS = 0.25
POLL_SECONDS = 0.2
DEFAULT_GRACE_SECONDS = 30.0
STOPPED_WITHOUT_SAVE = f"{contract.STOPPED_ON_NOTICE_MESSAGE} without a save"


class LaunchError(RuntimeError):
    """Why this Ray node could not start; the pod ends with it as its message."""


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def wait_for_head(
    address: str,
    timeout: float,
    connect: Callable[[tuple[str, int]], object] = socket.create_connection,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once the head's GCS port accepts a connection; LaunchError after `timeout`.

    The head's DNS name resolves only once its pod has an address, and its GCS listens
    only once `ray start --head` is done, so both errors mean "not yet".
    """
    deadline = clock() + timeout
    while True:
        try:
            sock = connect(split_address(address))
        except OSError as exc:
            last = exc
        else:
            close = getattr(sock, "close", None)
            if close:
                close()
            return
        if clock() >= deadline:
            raise LaunchError(
                f"could not reach the Ray head at {address} within {timeout:g} s: {last}"
            )
        sleep(RETRY_SECONDS)


def head_reachable(address: str) -> bool:
    try:
        socket.create_connection(split_address(address), timeout=1.0).close()
    except OSError:
        return False
    return True


def wait_for_nodes(
    count_alive: Callable[[], int],
    nnodes: int,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Return once `nnodes` Ray nodes are alive; LaunchError after `timeout`.

    A driver started on a half-formed cluster would wait in its placement groups forever.
    """
    deadline = clock() + timeout
    while True:
        alive = count_alive()
        if alive >= nnodes:
            return alive
        if clock() >= deadline:
            raise LaunchError(
                f"only {alive} of {nnodes} Ray nodes joined the head within {timeout:g} s"
            )
        sleep(RETRY_SECONDS)


def _alive_nodes_counter(address: str) -> Callable[[], int]:
    import ray  # the image's own Ray

    ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    return lambda: sum(1 for node in ray.nodes() if node.get("Alive"))


# --------------------------------------------------------------------------- the notice
def stop_margin(grace: float) -> float:
    """What the head keeps of the grace period to stop the driver and report: 5 s, or a
    third of a short one (half of it for the driver's SIGTERM, half to spare)."""
    return min(5.0, grace / 3)


def stop_wait(notice: Notice) -> float:
    """How long an ended driver gets between SIGTERM and SIGKILL: up to 5 s, and 1 s before
    the grace period runs out, so that the head still reports before the kubelet kills it."""
    return max(0.5, min(5.0, notice.seconds_left(0) - 1.0))


class Notice:
    """SIGTERM or the checkpoint request, recorded once, with the time it leaves: the grace
    period, or less where the request says when the node goes (the earliest deadline of the
    requests read: the operator writes the request again when the gang's deadline moves earlier).

    `file` is the pod's notice file: created on notice, read by the bridge.
    """

    def __init__(
        self, file: Path, grace: float, request_file: str | None, save: bool = True
    ) -> None:
        self.file, self.grace = file, grace
        self.save = save  # spec.saveOnNotice: whether the framework saves on it
        self.terminated = False  # SIGTERM: the pod goes; a request alone only asks for a save
        self.given_at: float | None = None
        self.request = RequestFile(request_file)

    def give(self, why: str) -> None:
        if why == "SIGTERM":
            self.terminated = True
        if self.given_at is None:
            self.given_at = time.monotonic()
            self.file.parent.mkdir(parents=True, exist_ok=True)
            self.file.write_text(f"{why}\n", encoding="utf-8")
            print(f"rljob: notice ({why}): saving through the framework", flush=True)

    @property
    def requested(self) -> bool:
        return self.request.value is not None

    @property
    def node_ends_at(self) -> float | None:
        """Monotonic: the earliest deadline a request has said, if any."""
        return self.request.node_ends_at

    def poll_request(self) -> None:
        """Read the request, also after a SIGTERM and after a first request: only it says when
        the node goes, and the operator writes it again when that moves earlier."""
        if self.request.poll():
            self.give("checkpoint request")

    def seconds_left(self, margin: float) -> float:
        if self.given_at is None:
            return float("inf")
        return self._ends_at() - margin - time.monotonic()

    def _ends_at(self) -> float:
        assert self.given_at is not None
        ends = self.given_at + self.grace
        return ends if self.node_ends_at is None else min(ends, self.node_ends_at)

    def limit(self) -> str:
        """What bounds the save, in words."""
        if self.given_at is not None and self._ends_at() == self.node_ends_at:
            left = self.node_ends_at - self.given_at
            return f"the deadline the checkpoint request gives ({left:.0f} s)"
        return f"the grace period ({self.grace:g} s)"


def _notice_from_env() -> Notice:
    grace = float(os.environ.get(contract.ENV_GRACE_SECONDS) or DEFAULT_GRACE_SECONDS)
    file = Path(os.environ.get(contract.ENV_NOTICE_FILE) or f"/tmp/ray/{contract.NOTICE_FILE_NAME}")
    save = os.environ.get(contract.ENV_SAVE_ON_NOTICE, "true") != "false"
    return Notice(file, grace, os.environ.get(contract.ENV_CHECKPOINT_REQUEST_FILE), save)


def bridge_environment(env: MutableMapping[str, str], launcher_dir: str, notice_file: Path) -> None:
    """What Ray's processes and the driver inherit: the bridge importable and preloaded in
    every Ray worker process, and where the notice will be."""
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = launcher_dir + (f":{path}" if path else "")
    preload = [m for m in (env.get(ENV_RAY_PRELOAD) or "").split(",") if m]
    env[ENV_RAY_PRELOAD] = ",".join([*preload, BRIDGE_MODULE] if BRIDGE_MODULE not in preload
                                    else preload)  # fmt: skip
    env[contract.ENV_NOTICE_FILE] = str(notice_file)


@dataclass(frozen=True)
class BridgeReport:
    """The bridge's progress record of this attempt, as the head reads it."""

    status: str
    step: int  # the last finished step
    unavailable: str | None = None  # why the framework cannot save on notice here
    step_seconds: float | None = None  # a step's mean time, without its save
    save_seconds: float | None = None  # a save's mean time, where the bridge measured one
    finished_at: float | None = None  # when the last step finished (Unix time)
    trained: tuple[float, float] | None = None  # the attempt's first and last step (Unix time)


def bridge_report(checkpoint_dir: str | None, attempt: str | None) -> BridgeReport | None:
    """The bridge's progress record if this attempt wrote it: the bridge runs in the
    framework's loop (a step has finished through it), whether it saved on notice, and
    whether it can."""
    if not checkpoint_dir:
        return None
    path = Path(checkpoint_dir) / progress.FRAMEWORK_PROGRESS_FILE_NAME
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or str(record.get(progress.ATTEMPT)) != str(attempt):
        return None
    status, step = record.get(progress.STATUS), record.get(progress.STEP)
    why = record.get(progress.SAVE_ON_NOTICE_UNAVAILABLE)
    if not isinstance(status, str) or not isinstance(step, int):
        return None
    step_seconds, save_seconds, finished_at = (
        positive_number(record.get(key))
        for key in (progress.STEP_SECONDS, progress.SAVE_SECONDS, progress.UNIX_TIME)
    )
    why = why if isinstance(why, str) and why else None
    trained = progress.trained_span(
        record.get(progress.FIRST_STEP_UNIX_TIME), record.get(progress.LAST_STEP_UNIX_TIME)
    )
    return BridgeReport(status, step, why, step_seconds, save_seconds, finished_at, trained)


def save_cannot_fit(seen: BridgeReport, seconds_left: float, now: float) -> str | None:
    """Why the rest of the step and a save cannot end within `seconds_left`, from the bridge's
    measured times (`now`: Unix time); None where they can, or where they are not known."""
    if seen.step_seconds is None or seen.save_seconds is None or seen.finished_at is None:
        return None
    rest = max(0.0, seen.step_seconds - (now - seen.finished_at))
    needed = rest + seen.save_seconds
    if needed <= seconds_left:
        return None
    return (f"the rest of the step and a save need about {needed:.0f} s (a step takes "
            f"{seen.step_seconds:.0f} s, a save {seen.save_seconds:.0f} s), more than the "
            f"{max(0.0, seconds_left):.0f} s left")  # fmt: skip


def _end_group(process: subprocess.Popen, wait: float) -> None:
    """SIGTERM the process's group, SIGKILL it after `wait` seconds."""
    for sig, grace in ((signal.SIGTERM, wait), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def returncode(process: subprocess.Popen) -> int:
    code = process.returncode
    return 128 - code if code is not None and code < 0 else int(code or 0)


def supervise_driver(
    driver: subprocess.Popen, notice: Notice, report: Callable[[], BridgeReport | None]
) -> tuple[int, str | None]:
    """Wait for the driver; mark the pod trained once the bridge reports a step of this
    attempt. After a notice, end it once the bridge reports the save on notice.
    A checkpoint request alone (a warning: the pod stays) never ends it otherwise; after
    SIGTERM it ends at once when nothing in the loop will save (no step of this attempt went
    through the bridge, or the bridge says why it cannot save), or when the grace period is
    nearly spent. (exit code, termination message)."""
    margin = stop_margin(notice.grace)
    judged = False  # whether a save can still fit was asked, once, at SIGTERM
    trained = False  # whether the bridge has reported a finished step of this attempt
    while driver.poll() is None:
        if not trained and report() is not None:
            progress.mark_trained()  # the head turns Ready: the attempt trains
            trained = True
        notice.poll_request()
        if notice.given_at is not None:
            seen = report()
            if seen and seen.status == progress.CHECKPOINTED_ON_REQUEST:
                _end_group(driver, stop_wait(notice))
                return contract.EXIT_CHECKPOINTED_ON_REQUEST, _saved_message(seen.step)
            why = None
            if not notice.terminated:
                pass  # a warning: the gang goes on until a save on notice or SIGTERM
            elif not notice.save:
                why = "spec.saveOnNotice is false"
            elif seen is None:
                why = "no step of this attempt has finished through rljob's bridge"
            elif seen.unavailable:
                why = seen.unavailable
            elif notice.seconds_left(margin) <= 0:
                why = f"the driver did not save within {notice.limit()}"
            elif not judged and not notice.requested:  # a save asked for earlier is under way
                judged = True
                why = save_cannot_fit(seen, notice.seconds_left(margin), time.time())
            if why:
                _end_group(driver, stop_wait(notice))
                last = f"; the last finished step is {seen.step}" if seen else ""
                return returncode(driver), f"{STOPPED_WITHOUT_SAVE}: {why}{last}"
        time.sleep(POLL_SECONDS)
    code = returncode(driver)
    seen = report() if notice.given_at is not None else None
    if seen and seen.status == progress.CHECKPOINTED_ON_REQUEST:
        return contract.EXIT_CHECKPOINTED_ON_REQUEST, _saved_message(seen.step)
    return code, None


def trained_message(seen: BridgeReport | None) -> str | None:
    """For a driver that ended with success: the attempt's first and last step, by which the
    operator times its training; None where the bridge timed no step of this attempt."""
    return progress.trained_line(*seen.trained) if seen and seen.trained else None


def _saved_message(step: int) -> str:
    return f"{contract.CHECKPOINTED_ON_REQUEST_MESSAGE}: saved step {step} through the framework"


def driver_command(driver: list[str], launcher: str) -> list[str]:
    """The driver run through the bridge when it is a Python program, else as it is."""
    if Path(driver[0]).name.startswith("python") and len(driver) > 1:
        return [driver[0], launcher, "driver", "--", *driver[1:]]
    return driver


def run_head(flags: list[str], driver: list[str], notice: Notice) -> int:
    address = os.environ[contract.ENV_RAY_HEAD_ADDRESS]
    _, port = split_address(address)
    started = subprocess.run(["ray", "start", "--head", f"--port={port}", *flags])
    if started.returncode != 0:
        raise LaunchError(f"ray start --head exited with {started.returncode}")
    nnodes = int(os.environ[contract.ENV_RAY_NNODES])
    count_alive = _alive_nodes_counter(address)
    alive = wait_for_nodes(count_alive, nnodes, float(os.environ[contract.ENV_RAY_JOIN_TIMEOUT]))
    import ray

    ray.shutdown()
    print(f"rljob: {alive} Ray nodes joined; starting the driver: {' '.join(driver)}", flush=True)
    with open(os.environ[contract.ENV_RAY_DRIVER_MARKER], "w", encoding="utf-8") as marker:
        marker.write(f"{alive}\n")
    process = subprocess.Popen(driver_command(driver, str(Path(__file__).absolute())),
                               start_new_session=True)  # fmt: skip
    listen_for_notice(notice)
    checkpoint_dir = os.environ.get(contract.ENV_CHECKPOINT_DIR)
    attempt = os.environ.get(contract.ENV_ATTEMPT)
    code, message = supervise_driver(
        process, notice, lambda: bridge_report(checkpoint_dir, attempt)
    )
    if message:
        _report(message)
    elif code == 0:
        finished = trained_message(bridge_report(checkpoint_dir, attempt))
        if finished:
            _report(finished)
    return code


def run_worker(flags: list[str], notice: Notice) -> int:
    """`ray start --block`; after SIGTERM keep the raylet until the head is gone (it has
    ended its driver, after the save) or the grace period is nearly spent. The checkpoint
    request is read here too, since the framework's loop may run on this node (verl's
    TaskRunner is a Ray worker anywhere in the gang)."""
    address = os.environ[contract.ENV_RAY_HEAD_ADDRESS]
    wait_for_head(address, float(os.environ[contract.ENV_RAY_JOIN_TIMEOUT]))
    raylet = subprocess.Popen(["ray", "start", f"--address={address}", "--block", *flags],
                              start_new_session=True)  # fmt: skip
    listen_for_notice(notice)
    margin = stop_margin(notice.grace) / 2  # the head stops first, and this node after it
    while raylet.poll() is None:
        notice.poll_request()
        if notice.terminated and (
            not notice.save or notice.seconds_left(margin) <= 0 or not head_reachable(address)
        ):
            print("rljob: stopping this Ray node", flush=True)
            _end_group(raylet, max(1.0, margin - 1.0))
            _report(f"{contract.STOPPED_ON_NOTICE_MESSAGE}: the pod was told to go (SIGTERM)")
            return 128 + signal.SIGTERM  # never 0, whatever `ray start` made of its end
        time.sleep(POLL_SECONDS)
    return returncode(raylet)


def forget_an_earlier_run(notice: Notice) -> None:
    """A container restarted in its pod (rljob's in-place restart) finds the notice file and
    the driver marker of the run before in the pod's emptyDir: they are not this run's, and
    would have the new run save and stop at once, or the head taken for Ready. One that cannot
    be removed is left, said on stderr: the node starts as it would without this."""
    for path in (notice.file, os.environ.get(contract.ENV_RAY_DRIVER_MARKER)):
        try:
            if path:
                Path(path).unlink(missing_ok=True)
        except OSError as exc:
            print(f"rljob: cannot remove {path} of an earlier run: {exc}", file=sys.stderr,
                  flush=True)  # fmt: skip


def listen_for_notice(notice: Notice) -> None:
    """From now on SIGTERM is a notice; before, there is nothing to save and it ends the pod."""
    signal.signal(signal.SIGTERM, lambda *_: notice.give("SIGTERM"))


def _stop(*_: object) -> None:
    raise SystemExit(128 + signal.SIGTERM)


def run_driver(command: list[str]) -> int:
    import rljob_ray_bridge

    code = rljob_ray_bridge.run_driver(command)
    if rljob_ray_bridge.LOOP.stopped_without_save:
        _report(f"{STOPPED_WITHOUT_SAVE}: {rljob_ray_bridge.LOOP.stopped_without_save}")
    return code


def _report(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    path = os.environ.get(contract.ENV_TERMINATION_LOG)
    if path:
        try:
            with open(path, "w", encoding="utf-8") as log:
                log.write(f"{message}\n")
        except OSError:
            pass  # no message file: the log line above is all there is


def parse_argv(argv: list[str]) -> tuple[str, list[str], list[str]]:
    """(role, ray start flags, command) of `head FLAGS... -- DRIVER...`, `worker FLAGS...`
    or `driver -- PYTHON ARGS...`."""
    role, rest = (argv[0] if argv else ""), argv[1:]
    flags, command = (
        (rest[: rest.index("--")], rest[rest.index("--") + 1 :]) if "--" in rest else (rest, [])
    )
    wants_command = role in ("head", "driver")
    if role not in ("head", "worker", "driver") or wants_command != bool(command):
        raise LaunchError(
            "usage: head [FLAGS...] -- DRIVER... | worker [FLAGS...] | driver -- ARGS...; "
            f"got {argv!r}"
        )
    return role, flags, command


def main(argv: list[str]) -> int:
    try:
        role, flags, command = parse_argv(argv)
        if role == "driver":
            return run_driver(command)
        notice = _notice_from_env()
        forget_an_earlier_run(notice)
        bridge_environment(os.environ, str(Path(__file__).absolute().parent), notice.file)
        signal.signal(signal.SIGTERM, _stop)
        if role == "head":
            return run_head(flags, command, notice)
        return run_worker(flags, notice)
    except LaunchError as exc:
        _report(f"rljob: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
