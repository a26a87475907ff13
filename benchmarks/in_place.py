"""A lost pod, the gang recreated, its survivors restarted in place, or restarted warm:
detection to the first step, and what a pending pod waiting for the gang's nodes takes, in one
run on kind.

Real: kind's kubelets and containerd (Kubernetes 1.36, the project's node image), the operator
installed by its chart, rljob's trainer image (FSDP2 on CPU, the demo's job: 2 pods x 1
process, one per worker, 1 of each worker's 2 test GPUs), its save on notice, checkpoints on a
folder every node mounts. Nothing is simulated.

The rounds. Three jobs of the same spec, one after the other, differing only in
spec.restartPolicy (nothing: the gang recreated; inPlace: the survivor's containers started
again in its pod; inPlace and warm: the survivor's trainer keeps its process and state). In
each, `--rounds`
times: wait until the attempt has trained WARM_STEPS steps, evict one of its two pods at random
(the Eviction API: SIGTERM and the grace period, as a drain or a spot handler), and read the
new attempt's recovery record once its first step is done (its pod turned Ready): detection
(the operator saw the attempt end), the gang created (the newest complete checkpoint found),
its first pod running, its first step.

The squatters: the case in-place restart exists for. Each job's last round is taken with a
pending pod on each worker that needs both of its GPUs (so it waits while the gang's pod holds
one), and runs SQUAT_SECONDS once placed. Recreated, the gang frees both workers and the
squatters take both; in place, the survivor keeps its node and only the lost pod's is taken.

    .venv/bin/python benchmarks/in_place.py [--rounds 3] [--out DIR]

The last line is JSON: {"recreate": {"first_step_s": median, "phases": {...}, "samples":
[...], "squatted_nodes": [...]}, "in_place": {...}, "warm": {...}, "ratio": in_place /
recreate, "warm_ratio": warm / recreate}.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "hack"))  # the demo's job: what `make demo-kind` applies
sys.path.insert(0, str(REPO / "tests"))

import yaml  # noqa: E402
from demo_frameworks import RljobDemo, Setting  # noqa: E402
from kube_steps import wait_for  # noqa: E402
from kubernetes import client, config  # noqa: E402
from rljob_operator import constants as c  # noqa: E402
from rljob_testenv import scenario  # noqa: E402
from rljob_testenv.stacks import KindStack  # noqa: E402

NAMESPACE = "bench"
CLAIM = "rljob-checkpoints"
WARM_STEPS = 4  # steps the attempt trains before its pod is evicted
SQUAT_SECONDS = 20
GPUS_PER_NODE = 2
PHASES = ("gang created", "first pod running", "first step")
MODES: dict[str, dict[str, bool]] = {
    "recreate": {},
    "in-place": {"inPlace": True},
    "warm": {"inPlace": True, "warm": True},
}


def say(message: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {message}", flush=True)


def seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


class Bench:
    def __init__(self, stack: KindStack, claim: Path, custom: client.CustomObjectsApi,
                 core: client.CoreV1Api) -> None:  # fmt: skip
        self.stack, self.claim, self.custom, self.core = stack, claim, custom, core
        self.rng = random.Random(54)

    def job(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, NAMESPACE, c.PLURAL,
                                                        name)  # fmt: skip

    def submit(self, name: str, policy: dict[str, bool], steps: int) -> RljobDemo:
        """The demo's job under `name`, one pod per worker, with the restart policy's fields
        `policy`."""
        setting = Setting(steps=steps, out=self.claim, claim=self.claim,
                          image=self.stack.trainer_image, model_size=None,
                          pod_log=lambda pod: "")  # fmt: skip
        demo = RljobDemo(setting)
        docs = demo.manifests()
        job = next(d for d in docs if d["kind"] == "RLTrainingJob")
        job["metadata"]["name"] = name
        spec = job["spec"]
        spec["args"] = [a.replace("grpo-demo", name) for a in spec["args"]]
        spec["checkpoint"]["directory"] = spec["checkpoint"]["directory"].replace("grpo-demo", name)
        spec.setdefault("restartPolicy", {}).update(policy)
        template = spec.setdefault("template", {}).setdefault("spec", {})
        apart = {"labelSelector": {"matchLabels": {c.LABEL_JOB: name}},
                 "topologyKey": "kubernetes.io/hostname"}  # fmt: skip
        template["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}
        }
        # The example's claim (bound to the shared folder's volume) and the job.
        self.stack.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump_all(docs))
        return demo

    def progress(self, name: str) -> dict[str, Any]:
        directory = self.job(name)["spec"]["checkpoint"]["directory"]
        return scenario.read_progress(self.claim / directory) or {}

    def round(self, name: str, squat: bool) -> dict[str, Any]:
        """Evict a pod once the attempt has trained WARM_STEPS; the new attempt's record once
        its first step is done (and the squatters' nodes, with `squat`)."""
        attempt = self.job(name).get("status", {}).get("attempt", 0)
        first = wait_for(lambda: self.progress(name).get("attempt") == attempt
                         and self.progress(name).get("step"), 300, f"{name} to train")  # fmt: skip
        wait_for(lambda: self.progress(name).get("step", 0) >= first + WARM_STEPS, 300,
                 f"{name} to train {WARM_STEPS} steps")  # fmt: skip
        pods = [p for p in scenario.trainer_pods(self.core, NAMESPACE, attempt)
                if p.metadata.labels.get(c.LABEL_JOB) == name]  # fmt: skip
        squatters = self.squatters(name) if squat else []
        victim = self.rng.choice(pods)
        survivor = next(p for p in pods if p.metadata.name != victim.metadata.name)
        say(f"{name}: evicting {victim.metadata.name} after step {self.progress(name)['step']}")
        meta = client.V1ObjectMeta(name=victim.metadata.name, namespace=NAMESPACE)
        self.core.create_namespaced_pod_eviction(victim.metadata.name, NAMESPACE,
                                                 client.V1Eviction(metadata=meta))  # fmt: skip

        def recovered() -> dict[str, Any] | None:
            records = self.job(name).get("status", {}).get("recoveries") or []
            last = records[-1] if records else {}
            return last if last.get("attempt") == attempt + 1 and last.get("firstStepAt") else None

        record = wait_for(recovered, 600, f"{name}'s attempt {attempt + 1} to train")
        sample = {
            "detection_to_first_step_s": seconds(record["detectedAt"], record["firstStepAt"]),
            "gang created": seconds(record["detectedAt"], record["gangCreatedAt"]),
            "first pod running": seconds(record["detectedAt"], record["firstRunningAt"]),
            "first step": seconds(record["detectedAt"], record["firstStepAt"]),
            "restarted_in_place": record.get("restartedInPlace", 0),
            "lost_steps": record.get("lostSteps"),
        }
        if squat:
            sample["squatted_nodes"] = self.squatted(squatters, survivor.spec.node_name,
                                                     victim.spec.node_name)  # fmt: skip
        say(f"{name}: {json.dumps(sample)}")
        return sample

    def squatters(self, name: str) -> list[str]:
        """A pending pod on each worker that needs both its GPUs, then runs SQUAT_SECONDS."""
        names = []
        for node in self.stack.nodes:
            pod = f"squat-{name}-{uuid.uuid4().hex[:4]}"
            gpus = {"limits": {"nvidia.com/gpu": str(GPUS_PER_NODE)}}
            self.core.create_namespaced_pod(NAMESPACE, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
                "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": node},
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "squat", "image": self.stack.trainer_image,
                                         "command": ["sleep", str(SQUAT_SECONDS)],
                                         "resources": gpus}]},
            })  # fmt: skip
            names.append(pod)
        wait_for(lambda: all(self.core.read_namespaced_pod(p, NAMESPACE).status.conditions
                             for p in names), 60, "the squatters to be seen")  # fmt: skip
        return names

    def squatted(self, squatters: list[str], survivor_node: str, victim_node: str) -> list[str]:
        """Which of the gang's nodes a squatter ran on ("survivor's", "lost pod's"); the
        squatters are removed."""
        roles = {survivor_node: "survivor's", victim_node: "lost pod's"}
        taken = []
        for pod in squatters:
            found = self.core.read_namespaced_pod(pod, NAMESPACE)
            if found.spec.node_name and found.status.phase in ("Running", "Succeeded"):
                taken.append(roles.get(found.spec.node_name, found.spec.node_name))
            self.core.delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0)
        return sorted(taken)

    def run(self, name: str, policy: dict[str, bool], rounds: int, steps: int
            ) -> list[dict[str, Any]]:  # fmt: skip
        self.submit(name, policy, steps)
        samples = [self.round(name, squat=i == rounds) for i in range(rounds + 1)]
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, NAMESPACE, c.PLURAL, name)
        wait_for(lambda: not [p for p in scenario.trainer_pods(self.core, NAMESPACE)
                              if p.metadata.labels.get(c.LABEL_JOB) == name], 180,
                 f"{name}'s pods to go")  # fmt: skip
        return samples


def summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    timed = samples[:-1]  # the squatters' round waits for them: not a restart's time
    return {
        "first_step_s": round(statistics.median(s["first step"] for s in timed), 2),
        "phases": {p: round(statistics.median(s[p] for s in timed), 2) for p in PHASES},
        "samples": timed,
        "squatted_nodes": samples[-1]["squatted_nodes"],
        "restarted_in_place": [s["restarted_in_place"] for s in samples],
        "lost_steps": [s["lost_steps"] for s in samples],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed evictions per job")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = (args.out or REPO / "out" / f"in-place-{datetime.now():%Y%m%d-%H%M%S}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    stack = KindStack("bench-in-place", REPO, workers=2, gpus_per_node=GPUS_PER_NODE, out=out)
    if stack.exists():
        stack.down(say)
    try:
        kubeconfig = stack.up(say)
        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        api = client.ApiClient(configuration)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        stack.start_operator(NAMESPACE, say)
        claim, volume = stack.claim_volume("bench-checkpoints", NAMESPACE, CLAIM)
        stack.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([volume]))
        bench = Bench(stack, claim, custom, core)
        steps = (args.rounds + 1) * 40 + 40
        result: dict[str, Any] = {}
        for name, policy in MODES.items():
            result[name.replace("-", "_")] = summary(bench.run(name, policy, args.rounds, steps))
        for mode, key in (("in_place", "ratio"), ("warm", "warm_ratio")):
            result[key] = round(result[mode]["first_step_s"]
                                / result["recreate"]["first_step_s"], 2)  # fmt: skip
    finally:
        stack.down(say)
    for mode in ("recreate", "in_place", "warm"):
        r = result[mode]
        phases = ", ".join(f"{p} {v:.1f} s" for p, v in r["phases"].items())
        say(
            f"{mode}: detection to first step {r['first_step_s']:.1f} s (median of "
            f"{len(r['samples'])}; {phases}); squatters took: {r['squatted_nodes'] or 'none'}"
        )
    say(f"in place / recreate: {result['ratio']:.2f}, warm / recreate: {result['warm_ratio']:.2f}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
