"""The operator as a child process of a test, a benchmark or the demo, as a user would run it.

It is ready when its health endpoint (kopf's `--liveness`) answers: kopf serves it only once
the startup handler has run, which fills the cache and starts the workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from rljob_operator import constants as c

from . import binaries
from .ports import free_port

START_TIMEOUT_SECONDS = 60.0


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_path: Path,
        *,
        args: Sequence[str] | None = None,
        **env: str,
    ) -> None:
        """`args` replaces the default scope and peering flags (--standalone --namespace NS),
        e.g. with the flags a Helm release passes. The metrics port is always added, and the
        health endpoint where `args` has none (free ports, so that operators run side by side)."""
        self.kubeconfig, self.namespace, self.log_path = kubeconfig, namespace, log_path
        self.args = list(args) if args is not None else ["--standalone", "--namespace", namespace]
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.metrics_port = free_port()
        given = _flag_value(self.args, "--liveness")
        if given is None:
            given = f"http://127.0.0.1:{free_port()}/healthz"
            self.args += ["--liveness", given]
        self.health_url = given.replace("//0.0.0.0:", "//127.0.0.1:")

    def start(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1", **self.env)
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rljob_operator", "operator", *self.args,
             "--metrics-port", str(self.metrics_port)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited at start:\n{self.log()}")
            if self.healthy():
                return
            time.sleep(0.2)
        raise RuntimeError(f"the operator's {self.health_url} did not answer:\n{self.log()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.health_url, timeout=2) as reply:
                return reply.status == 200
        except OSError:  # not listening yet, or an error status
            return False

    def kill(self) -> None:
        """Die at once, as a crashed or rescheduled operator does."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as reply:
            return reply.read().decode()

    def log(self) -> str:
        return self.log_path.read_text()


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of `--flag=value` or `--flag value` in args, if there."""
    for index, arg in enumerate(args):
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
        if arg == flag and index + 1 < len(args):
            return args[index + 1]
    return None


def run_operator(process: OperatorProcess) -> Iterator[OperatorProcess]:
    """Run the operator for a test; at the end, delete the test's jobs while it still runs,
    so that it releases their pods, as a user's `kubectl delete rltj` would."""
    process.start()
    yield process
    stop_after_the_tests_jobs(process)


def stop_after_the_tests_jobs(process: OperatorProcess) -> None:
    """The end of a test's operator: the test's jobs deleted while it runs (it releases their
    pods), then the process stopped, and its log printed (pytest shows it where the test
    failed)."""
    try:
        if process.proc and process.proc.poll() is None:
            delete_jobs_and_wait(process)
    finally:
        process.stop()
        print(f"--- operator log ---\n{process.log()}")


def delete_jobs_and_wait(process: OperatorProcess, timeout: float = 30) -> None:
    """Delete the namespace's jobs and wait until the operator has released every pod of
    theirs (none holds rljob's finalizer). The pods then go as the cluster removes them (the
    garbage collector, their kubelet), which the operator takes no part in: a test need not
    wait for that (a pod Kueue holds by its own finalizer outlives its node by a minute)."""
    kubectl = [
        str(binaries.require("kubectl")),
        "--kubeconfig",
        str(process.kubeconfig),
        "-n",
        process.namespace,
    ]
    deleted = subprocess.run(
        [*kubectl, "delete", "rltj", "--all", "--wait=false"],
        capture_output=True,
        text=True,
        check=False,
    )
    if deleted.returncode != 0:
        print(f"deleting the test's jobs failed: {deleted.stderr.strip()}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = subprocess.run(
            [*kubectl, "get", "pods", "-l", c.LABEL_JOB, "-o", "json"],
            capture_output=True,
            text=True,
            check=False,
        )
        if listed.returncode == 0 and not any(
            c.FINALIZER in (pod["metadata"].get("finalizers") or [])
            for pod in json.loads(listed.stdout).get("items", [])
        ):
            return
        time.sleep(0.5)
