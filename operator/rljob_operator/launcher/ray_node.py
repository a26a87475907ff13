"""Start this pod's Ray node; on the head, wait for the whole gang, then become the driver.

This file runs inside the user's image, which has Python and Ray but not rljob:

    python3 -c <this source> head [ray start flags...] -- DRIVER...
    python3 -c <this source> worker [ray start flags...]

It uses the standard library only and finds `ray` on the image's PATH. The operator
renders the flags and sets the RLJOB_RAY_* variables below (launcher.ray).

Failures that the operator should report are written to the termination message, so that
`kubectl describe` and the job's status say which address could not be reached, or how many
Ray nodes joined, instead of a bare exit code.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

ENV_HEAD_ADDRESS = "RLJOB_RAY_HEAD_ADDRESS"  # host:port of the head's GCS
ENV_NNODES = "RLJOB_RAY_NNODES"
ENV_JOIN_TIMEOUT = "RLJOB_RAY_JOIN_TIMEOUT_SECONDS"
ENV_TERMINATION_LOG = "RLJOB_TERMINATION_LOG"
# Written by the head just before it becomes the driver; the head's readiness probe reads it.
ENV_DRIVER_MARKER = "RLJOB_RAY_DRIVER_MARKER"
RETRY_SECONDS = 2.0


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


def run_head(flags: list[str], driver: list[str]) -> None:
    address = os.environ[ENV_HEAD_ADDRESS]
    _, port = split_address(address)
    started = subprocess.run(["ray", "start", "--head", f"--port={port}", *flags])
    if started.returncode != 0:
        raise LaunchError(f"ray start --head exited with {started.returncode}")
    nnodes = int(os.environ[ENV_NNODES])
    count_alive = _alive_nodes_counter(address)
    alive = wait_for_nodes(count_alive, nnodes, float(os.environ[ENV_JOIN_TIMEOUT]))
    import ray

    ray.shutdown()
    print(f"rljob: {alive} Ray nodes joined; starting the driver: {' '.join(driver)}", flush=True)
    with open(os.environ[ENV_DRIVER_MARKER], "w", encoding="utf-8") as marker:
        marker.write(f"{alive}\n")
    os.execvp(driver[0], driver)


def run_worker(flags: list[str]) -> None:
    address = os.environ[ENV_HEAD_ADDRESS]
    wait_for_head(address, float(os.environ[ENV_JOIN_TIMEOUT]))
    command = ["ray", "start", f"--address={address}", "--block", *flags]
    os.execvp(command[0], command)


def _report(message: str) -> None:
    print(f"rljob: {message}", file=sys.stderr, flush=True)
    path = os.environ.get(ENV_TERMINATION_LOG)
    if path:
        try:
            with open(path, "w", encoding="utf-8") as log:
                log.write(f"rljob: {message}\n")
        except OSError:
            pass  # no message file: the log line above is all there is


def parse_argv(argv: list[str]) -> tuple[str, list[str], list[str]]:
    """(role, ray start flags, driver) of `head FLAGS... -- DRIVER...` or `worker FLAGS...`."""
    role, rest = (argv[0] if argv else ""), argv[1:]
    flags, driver = (
        (rest[: rest.index("--")], rest[rest.index("--") + 1 :]) if "--" in rest else (rest, [])
    )
    if role not in ("head", "worker") or (role == "head") != bool(driver):
        raise LaunchError(f"usage: head [FLAGS...] -- DRIVER... | worker [FLAGS...]; got {argv!r}")
    return role, flags, driver


def main(argv: list[str]) -> int:
    try:
        role, flags, driver = parse_argv(argv)
        if role == "head":
            run_head(flags, driver)
        else:
            run_worker(flags)
    except LaunchError as exc:
        _report(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
