"""The operator as a child process of the test, as a user would run it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class OperatorProcess:
    def __init__(self, kubeconfig: Path, namespace: str, log_path: Path, **env: str) -> None:
        self.kubeconfig, self.namespace, self.log_path = kubeconfig, namespace, log_path
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1", **self.env)
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rljob_operator", "operator", "--standalone",
             "--namespace", self.namespace],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if "rljob operator started" in self.log_path.read_text():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the operator exited at start:\n{self.log()}")
            time.sleep(0.2)

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

    def log(self) -> str:
        return self.log_path.read_text()
