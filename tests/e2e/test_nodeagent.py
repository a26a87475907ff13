"""The node agent as a kubelet, with a shell for a trainer: what the process sees, what the
pod's status says, and how deletion and a deleted Node end it."""

from __future__ import annotations

import uuid
from pathlib import Path

from e2e_steps import POOL_LABEL, wait_for
from kube_steps import read_pod
from kubernetes import client

SCRIPT = r"""
trap 'echo "got TERM"; exit 7' TERM
echo "master=$MASTER_ADDR dir=$CKPT name=$POD_NAME node=$NODE_NAME ip=$POD_IP arg=$1"
echo "config=$(cat /etc/app/setting)"
echo saved > "$CKPT/from-$POD_NAME"
while true; do
  echo "request=[$(cat /etc/podinfo/request)]"
  if [ -s /etc/podinfo/request ]; then echo "asked to save" > /dev/termination-log; fi
  sleep 0.2
done
"""


def pod_body(name: str, pool: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {}, "finalizers": ["rljob.io/test-hold"]},
        "spec": {
            "nodeSelector": {POOL_LABEL: pool},
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 20,
            "containers": [{
                "name": "main", "image": "example.invalid/shell:1",
                "command": ["sh", "-c", SCRIPT, "script"],
                "args": ["$(CKPT)/x"],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "env": [
                    {"name": "MASTER_ADDR", "value": "job-n0.job.ns.svc.cluster.local"},
                    {"name": "CKPT", "value": "/checkpoints"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "volumeMounts": [
                    {"name": "ckpt", "mountPath": "/checkpoints"},
                    {"name": "info", "mountPath": "/etc/podinfo"},
                    {"name": "conf", "mountPath": "/etc/app"},
                ],
            }],
            "volumes": [
                {"name": "ckpt", "emptyDir": {}},
                {"name": "info", "downwardAPI": {"items": [{"path": "request", "fieldRef": {
                    "fieldPath": "metadata.annotations['rljob.io/checkpoint-request']"}}]}},
                {"name": "conf", "configMap": {"name": "app"}},
            ],
        },
    }  # fmt: skip


def test_a_pod_runs_as_a_local_process_and_ends_like_a_kubelets(core, namespace, agents):
    pool = agents(1, gpus=1)
    node = pool.nodes[0]
    lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(node, "kube-node-lease")
    assert lease.spec.holder_identity == node
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app"), data={"setting": "42"}),
    )
    name = f"shell-{uuid.uuid4().hex[:4]}"
    core.create_namespaced_pod(namespace, pod_body(name, namespace))

    pod = wait_for(lambda: (p := read_pod(core, namespace, name)) and p.status.phase == "Running" and p,
                   what="the pod to run")  # fmt: skip
    running = pod.status.container_statuses[0].state.running
    assert running.started_at and pod.spec.node_name == node
    assert pod.status.pod_ip.startswith("10.88.")  # the process itself is told 127.0.0.1
    record = wait_for(lambda: next(iter(pool.records()), None), what="the launch record")
    wait_for(lambda: "request=[]" in record.log(), what="the script's first loop")
    log = record.log()
    local = record.env["CKPT"]
    assert f"master=127.0.0.1 dir={local} name={name} node={node} ip=127.0.0.1 arg={local}/x" in log
    assert "config=42" in log
    # The emptyDir, per pod, on a short path (Unix sockets live in Ray's).
    assert local == f"/tmp/rljob-na-{pod.metadata.uid[:12]}/ckpt"
    assert (Path(local) / f"from-{name}").read_text() == "saved\n"

    core.patch_namespaced_pod(
        name, namespace, {"metadata": {"annotations": {"rljob.io/checkpoint-request": "now"}}}
    )
    wait_for(lambda: "request=[now]" in record.log(), what="the annotation in the projected file")
    core.delete_namespaced_pod(name, namespace)  # grace 20s: the script traps TERM and exits 7

    def ended():
        p = read_pod(core, namespace, name)
        return p and p.status.container_statuses[0].state.terminated and p

    pod = wait_for(ended, what="the terminated status")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (7, "Error")
    assert terminated.message == "asked to save\n"  # the file wins over the log
    assert pod.status.phase == "Failed" and "got TERM" in record.log()
    # Then the agent deletes it with grace 0; the test's finalizer holds it until released.
    wait_for(
        lambda: read_pod(core, namespace, name).metadata.deletion_grace_period_seconds == 0,
        what="the kubelet's final delete",
    )
    core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})
    wait_for(lambda: read_pod(core, namespace, name) is None, what="the pod to go")
    assert pool.live_processes() == []
    wait_for(lambda: not Path(local).exists(), 10, "the emptyDir to be removed")


def test_deleting_the_node_kills_its_processes_at_once(core, namespace, agents):
    pool = agents(1, gpus=1)
    node = pool.nodes[0]
    name = f"sleeper-{uuid.uuid4().hex[:4]}"
    body = pod_body(name, namespace)
    body["metadata"]["finalizers"] = []
    body["spec"]["containers"][0].update(command=["sleep", "300"], args=[], volumeMounts=[])
    body["spec"]["volumes"] = []
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: pool.live_processes(), what="the pod's process")

    core.delete_node(node)

    wait_for(lambda: pool[node].gone.is_set(), what="the agent to notice")
    wait_for(lambda: pool.live_processes() == [] or None, 10, what="the process to die")
    wait_for(lambda: pool.records()[0].ended_by == "node-deleted", 10, what="the record")
