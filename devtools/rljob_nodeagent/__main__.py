"""`python -m rljob_nodeagent --kubeconfig K --node NAME [--node NAME2 ...] --root DIR [--gpus 8]`.

Runs until SIGINT or SIGTERM (then ends its pods' processes and deletes its Nodes,
unless --keep-nodes), or until every one of its Nodes has been deleted.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from .agent import NodeAgent
from .render import NodeShape


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rljob_nodeagent",
        description="Test tooling: act as the kubelet of GPU Nodes whose pods run as local "
        "processes of this project's environment (see docs/nodeagent.md).",
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", action="append", required=True, help="a Node to run; repeat")
    parser.add_argument("--root", required=True, help="local directory for volumes and logs")
    parser.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu capacity per node")
    parser.add_argument("--cpu", default="16")
    parser.add_argument("--memory", default="64Gi")
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--heartbeat", type=float, default=10.0, help="seconds between heartbeats")
    parser.add_argument("--grace", type=float, default=10.0,
                        help="seconds pods get after SIGTERM when the agent stops")  # fmt: skip
    parser.add_argument("--keep-nodes", action="store_true", help="leave the Nodes on exit")
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(threadName)s: %(message)s",
        stream=sys.stdout,
    )
    labels = {}
    for item in args.label:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"--label {item!r}: expected KEY=VALUE", file=sys.stderr)
            return 2
        labels[key] = value
    shape = NodeShape(gpus=args.gpus, cpu=args.cpu, memory=args.memory)
    agents = [
        NodeAgent(args.kubeconfig, node, args.root, shape, labels, heartbeat_seconds=args.heartbeat)
        for node in args.node
    ]
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        for agent in agents:
            agent.start(wait=False)
        for agent in agents:
            agent.wait_ready()
            print(f"node {agent.node} is ready", flush=True)
        while not stop.wait(0.5):
            if all(a.gone.is_set() for a in agents):
                print("every node of this agent was deleted: exiting", flush=True)
                break
    finally:
        threads = [
            threading.Thread(target=a.stop, args=(not args.keep_nodes, args.grace)) for a in agents
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
