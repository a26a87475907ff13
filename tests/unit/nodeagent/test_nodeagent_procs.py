"""The node agent finds a pod's processes by the marker in their environment, including
those that left the process group (as torchrun's workers do), and kills them all."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from kube_steps import wait_for
from rljob_nodeagent import kill_leftovers, live_processes
from rljob_nodeagent.procs import marked_processes
from rljob_nodeagent.render import MARKER_ENV

# A parent that starts a child in a session of its own, prints the child's pid, and waits.
SPAWNER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_pods_processes_are_found_and_killed_wherever_they_went():
    node = f"unit-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, **{MARKER_ENV: f"{node}/pod-uid"})
    parent = subprocess.Popen([sys.executable, "-c", SPAWNER], env=env, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    try:
        child = int(parent.stdout.readline())
        # Popen returns in the spawner while the child is still in its exec, which shows the
        # child's environment in /proc only once it has set up the new program's stack.
        wait_for(lambda: child in marked_processes(f"{node}/pod-uid"), 10, "the child's marker")
        assert set(marked_processes(f"{node}/pod-uid")) == {parent.pid, child}
        assert set(live_processes(node)) == {parent.pid, child}
        assert marked_processes(f"{node}/other-uid") == []
        assert marked_processes(f"{node}x") == []

        assert set(kill_leftovers([node])) == {parent.pid, child}
        parent.wait(10)
        wait_for(lambda: live_processes(node) == [], 10, "the killed processes to be gone")
    finally:
        parent.kill()
        parent.wait()


def test_a_readiness_probe_reports_each_change_after_its_thresholds(tmp_path):
    """The real probe command, run as the agent runs it, against a file that comes and goes."""
    from rljob_nodeagent.agent import ReadinessProber, _Prepared
    from rljob_nodeagent.render import ReadinessProbe

    marker = tmp_path / "driver-started"
    probe = ReadinessProbe(["test", "-e", str(marker)], 0, 1, 2, 1)
    prepared = _Prepared(["true"], dict(os.environ), tmp_path, tmp_path / "log", [], probe)
    reports: list[bool] = []
    prober = ReadinessProber(prepared, False, reports.append)

    prober.tick()
    assert reports == []  # not ready, and the probe agrees
    marker.write_text("2\n")
    prober.tick()
    assert reports == [True]  # one success is enough
    marker.unlink()
    prober.tick()
    assert reports == [True]  # one failure is not (failureThreshold 2)
    prober.tick()
    assert reports == [True, False]
