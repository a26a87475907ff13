"""`make demo`: a local control plane, the CRD, the operator, and the demo job.

What runs today: the cluster, the operator, and the job's gang on kwok GPU nodes,
shown with `kubectl get`. Real trainer processes on a node agent, a live
preemption and the bit-exact check come with the end-to-end work (see README).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rljob_testenv import binaries, cluster

REPO = Path(__file__).resolve().parent.parent
NAME = "demo"


def kubectl(*args: str) -> str:
    return cluster.kubectl(NAME, *args)


def main() -> int:
    binaries.install()
    kubeconfig = cluster.up(NAME, gpu_nodes=3)
    operator = None
    try:
        kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
        kubectl("wait", "--for=condition=Established", "crd/rltrainingjobs.rljob.io")
        env = dict(os.environ, KUBECONFIG=str(kubeconfig))
        operator = subprocess.Popen(
            [sys.executable, "-m", "rljob_operator", "operator", "--standalone",
             "-n", "default", "--metrics-port", "0"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        kubectl("apply", "-f", str(REPO / "examples" / "grpo-demo.yaml"))
        for _ in range(30):
            out = kubectl("get", "rltj,pods", "-o", "wide")
            if "Running" in kubectl("get", "rltj", "grpo-demo", "-o", "jsonpath={.status.phase}"):
                break
            time.sleep(1)
        print(out)
        print(kubectl("get", "events", "--field-selector", "involvedObject.kind=RLTrainingJob"))
        print(
            "The gang runs on kwok GPU nodes, which run no processes. Still to come: real\n"
            "trainer processes on a node agent, a live preemption and its recovery, and the\n"
            "bit-exact check against an uninterrupted run."
        )
    finally:
        if operator:
            operator.terminate()
            operator.wait(timeout=10)
        cluster.down(NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
