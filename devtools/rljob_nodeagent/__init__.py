"""A node agent for tests and the demo: a Node that runs its pods as local processes.

Test and development tooling, not part of the operator. Each agent registers a GPU
Node (without kwok's annotation, so kwok leaves it alone), keeps it Ready, and runs
every pod bound to it as a local process in this project's environment: the image is
not pulled, the container's command is what counts. Volumes map to local directories,
container paths and the cluster's service names in env values and arguments are
rewritten to them and to 127.0.0.1, and the pod's status is reported the way a kubelet
reports it. See docs/nodeagent.md.
"""

from __future__ import annotations

from .agent import AgentPool, LaunchRecord, NodeAgent
from .procs import kill_leftovers, live_processes
from .render import claim_dir

__all__ = [
    "AgentPool",
    "LaunchRecord",
    "NodeAgent",
    "claim_dir",
    "kill_leftovers",
    "live_processes",
]
