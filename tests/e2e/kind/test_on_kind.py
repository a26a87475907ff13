"""On kind: rljob's story as a user meets it, on the cluster tool users know.

A 2-pod gang of rljob's own trainer (the trainer image, CPU) on two kind workers, one of which
is drained with `kubectl drain` between two periodic saves: the Eviction API, SIGTERM and the
grace period, as a spot reclaim or a maintenance drain. rljob saves on that notice,
recreates the gang and resumes from the newest complete checkpoint; the job is judged by its
status and by its final weights, bitwise equal to an uninterrupted run.

The same gang with spec.restartPolicy.inPlace, one pod evicted: the other pod stays (its uid,
node and IP), its trainer restarted in it by the kubelet's container restart rule, and only
the evicted pod is replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chart_cluster import RENDEZVOUS_PORT
from e2e_steps import (
    REPORTS,
    SAVE_INTERVAL,
    assert_same_run_as_reference,
    create_job,
    evict,
    experiment_path,
    one_pod_per_node,
    rljob_job,
    running_gang,
    status,
    wait_succeeded,
)
from kube_steps import wait_for
from rljob_operator import constants as c
from rljob_operator.api.reasons import EndKind, Phase
from rljob_testenv import images, kind
from rljob_testenv.scenario import read_progress, trainer_pods
from rljob_trainer.faults import ENV_TEST_SLOW_ROLLOUT_FROM_STEP, ENV_TEST_SLOW_ROLLOUT_TOKEN

IMAGE_CONFIG = "/app/configs/grpo_tiny.yaml"  # where the trainer image keeps its configs
# A step here takes about a second, less than `kubectl drain` takes to reach the trainer: from
# the step after the one the test waits for, each sampled token takes this long (3 a step), so
# that the notice lands in that step or the next, and not past the next periodic save.
SLOW_TOKEN_SECONDS = 2


def kind_job(name: str, slow_from_step: int) -> dict[str, Any]:
    """The e2e GRPO job as 2 pods x 1 process of the trainer image, CPU only, one pod per
    worker (required anti-affinity, as a user would ask for one pod per GPU node)."""
    body = rljob_job(name, 2, 1, RENDEZVOUS_PORT, pool="unused", max_failures=1)
    spec = body["spec"]
    spec["env"] = [{"name": ENV_TEST_SLOW_ROLLOUT_TOKEN, "value": str(SLOW_TOKEN_SECONDS)},
                   {"name": ENV_TEST_SLOW_ROLLOUT_FROM_STEP, "value": str(slow_from_step)}]  # fmt: skip
    spec["image"] = images.TRAINER.tag
    spec["args"] = [IMAGE_CONFIG if a.endswith("grpo_tiny.yaml") else a for a in spec["args"]]
    spec["resources"] = {"requests": {"cpu": "250m", "memory": "512Mi"}}
    spec["template"]["spec"] = {
        "terminationGracePeriodSeconds": 60,
        "affinity": one_pod_per_node(name),
    }
    return body


def trained_gang(api, core, namespace: str, body: dict[str, Any], checkpoints: Path, step: int):
    """Create the job; its gang of attempt 0, one pod per worker, once it has finished `step`."""
    create_job(api, namespace, body)
    gang = running_gang(core, namespace, 0, 2, timeout=300)
    assert len({pod.spec.node_name for pod in gang}) == 2, "one pod per worker"
    wait_step(api, namespace, body["metadata"]["name"], checkpoints, step)
    return gang


def wait_step(api, namespace: str, name: str, checkpoints: Path, step: int) -> None:
    """Until attempt 0 has finished `step`; a job that failed meanwhile fails the test at once."""

    def reached() -> bool:
        st = status(api, namespace, name)
        assert st.get("phase") != Phase.FAILED, f"the job failed: {st.get('lastEnd')}"
        progress = read_progress(checkpoints) or {}
        return progress.get("attempt") == 0 and progress.get("step", 0) >= step

    wait_for(reached, 300, f"attempt 0 to finish step {step}", interval=1)


# The first test of the file also makes the cluster and loads the images (minutes).
@pytest.mark.timeout(1500)
def test_a_drained_worker_saves_on_notice_and_the_gang_resumes_bit_exact(
    stack, cluster_api, cluster_core, jobs_namespace, chart_operator, shared_claim, reference, rng
):
    name = "drained"
    checkpoints = shared_claim / experiment_path(name) / "checkpoints"
    # Late in the run (the slow steps come after it), and the two steps after it between
    # periodic saves: the save on notice is then the only save it can resume from.
    at = rng.choice([17, 21])
    assert (at + 1) % SAVE_INTERVAL and (at + 2) % SAVE_INTERVAL
    body = kind_job(name, slow_from_step=at + 1)
    gang = trained_gang(cluster_api, cluster_core, jobs_namespace, body, checkpoints, at)
    victim = rng.choice(gang).spec.node_name
    print(f"draining {victim} after step {at}")
    kind.kubectl(stack.name, "drain", victim, f"--pod-selector={c.LABEL_JOB}={name}",
                 "--ignore-daemonsets", "--timeout=180s", timeout=240)  # fmt: skip
    # The new gang needs both workers again (one pod per node).
    kind.kubectl(stack.name, "uncordon", victim)
    job = wait_succeeded(cluster_api, jobs_namespace, name, timeout=600)

    st = job["status"]
    (recovery,) = st["recoveries"]
    assert recovery["kind"] == EndKind.DISRUPTION, recovery
    assert recovery["reason"] == "EvictionByEvictionAPI", recovery
    assert recovery["node"] == victim, recovery
    # The save on SIGTERM is the resume point, not the periodic save before it: no finished
    # step is lost.
    assert at <= recovery["resumedFromStep"] <= at + 2, recovery
    assert recovery["lostSteps"] == 0, recovery
    assert (st["preemptions"], st["failures"], st["attempt"]) == (1, 0, 1), st
    assert_same_run_as_reference(checkpoints, reference)
    REPORTS.append(
        f"kind, 2 pods on 2 workers, {victim} drained after step {at}: {recovery['reason']}, "
        f"resumed from step {recovery['resumedFromStep']}, lost {recovery['lostSteps']}; "
        "final weights bitwise equal to the uninterrupted run"
    )


@pytest.mark.timeout(900)
@pytest.mark.parametrize("warm", [False, True], ids=["in-place", "warm"])
def test_an_evicted_pod_is_replaced_and_the_other_restarts_in_place_bit_exact(
    stack, cluster_api, cluster_core, jobs_namespace, chart_operator, shared_claim, reference, rng,
    warm,
):  # fmt: skip
    """In place: the kept pod's containers start again in it. Warm: the kept pod's trainer
    keeps its process and its state, and only the new pod's trainer starts and reads."""
    name = "warm" if warm else "in-place"
    checkpoints = shared_claim / experiment_path(name) / "checkpoints"
    at = rng.choice([17, 21])
    body = kind_job(name, slow_from_step=at + 1)
    body["spec"]["restartPolicy"]["inPlace"] = True
    body["spec"]["restartPolicy"]["warm"] = warm
    gang = trained_gang(cluster_api, cluster_core, jobs_namespace, body, checkpoints, at)
    victim = rng.choice(gang)
    (survivor,) = [pod for pod in gang if pod.metadata.name != victim.metadata.name]
    print(f"evicting {victim.metadata.name} after step {at}; {survivor.metadata.name} stays")
    evict(cluster_core, jobs_namespace, victim.metadata.name)

    new_gang = running_gang(cluster_core, jobs_namespace, 1, 2, timeout=300)
    kept = next(pod for pod in new_gang if pod.metadata.name == survivor.metadata.name)
    assert (kept.metadata.uid, kept.spec.node_name, kept.status.pod_ip) == (
        survivor.metadata.uid, survivor.spec.node_name, survivor.status.pod_ip)  # fmt: skip
    assert kept.status.container_statuses[0].restart_count == (0 if warm else 1)
    job = wait_succeeded(cluster_api, jobs_namespace, name, timeout=600)
    kept_log = cluster_core.read_namespaced_pod_log(survivor.metadata.name, jobs_namespace)
    assert ("warm restart: attempt 1 with step" in kept_log) == warm, kept_log[-3000:]

    st = job["status"]
    (recovery,) = st["recoveries"]
    assert recovery["reason"] == "EvictionByEvictionAPI", recovery
    assert recovery["restartedInPlace"] == 1, recovery
    assert at <= recovery["resumedFromStep"] <= at + 2, recovery
    assert recovery["lostSteps"] == 0, recovery
    assert (st["preemptions"], st["failures"], st["attempt"]) == (1, 0, 1), st
    in_place = next(x for x in st["conditions"] if x["type"] == "InPlaceRestart")
    assert (in_place["status"], in_place["reason"]) == ("True", "PodsKept"), in_place
    # Attempt 1 is the kept pod and one new pod, nothing else.
    names = {pod.metadata.name for pod in trainer_pods(cluster_core, jobs_namespace, 1)}
    assert survivor.metadata.name in names and len(names) == 2, names
    assert_same_run_as_reference(checkpoints, reference)
    REPORTS.append(
        f"kind, 2 pods on 2 workers, {victim.metadata.name} evicted after step {at}: "
        f"{survivor.metadata.name} restarted {'warm' if warm else 'in place'} (same uid, node, "
        "IP), the other replaced, "
        f"resumed from step {recovery['resumedFromStep']}, lost {recovery['lostSteps']}; "
        "final weights bitwise equal to the uninterrupted run"
    )
