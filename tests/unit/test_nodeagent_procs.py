"""The node agent finds a pod's processes by the marker in their environment, including
those that left the process group (as torchrun's workers do), and kills them all."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

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
        assert set(marked_processes(f"{node}/pod-uid")) == {parent.pid, child}
        assert set(live_processes(node)) == {parent.pid, child}
        assert marked_processes(f"{node}/other-uid") == []
        assert marked_processes(f"{node}x") == []

        assert set(kill_leftovers([node])) == {parent.pid, child}
        parent.wait(10)
        deadline = time.monotonic() + 10
        while live_processes(node) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert live_processes(node) == []
    finally:
        parent.kill()
        parent.wait()
