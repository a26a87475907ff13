"""The Helm chart (charts/rljob-operator) on the real control plane.

Rendering: `helm lint`, server-side dry runs of every variant, values.schema.json, the
"restricted" Pod Security Standard. Running: the chart is installed and the operator runs as a
local process (the test cluster has no kubelet that could run its pod) with a token of the
chart's ServiceAccount and the flags and environment of the chart's Deployment, so that what it
may do is exactly what the chart grants.
"""

from __future__ import annotations

import json
import re
import uuid
from types import SimpleNamespace

import pytest
import test_recovery
import yaml
from chart_helpers import (
    CHART,
    CHART_CRDS,
    CI_VALUES,
    REPO,
    SERVICEMONITOR_CRD,
    file_digests,
    find,
    helm,
    installed_manifests,
    kubectl,
    operator_command,
    render,
    service_account_kubeconfig,
)
from kube_steps import free_port, wait_for
from kubernetes import client
from rljob_operator import constants as c
from rljob_operator.api.reasons import Phase
from rljob_testenv.operator_process import OperatorProcess, delete_jobs_and_wait
from test_job_lifecycle import finish, get_job, trainer_pods
from test_recovery import assert_one_recovery_from_step_20, job_body, resumed_gang, start

# The recovery tests' fixtures: GPU nodes of the test's own, the claim `ckpts` bound to a volume,
# and that volume's directory with complete checkpoints at steps 10 and 20 and a torn one at 30.
nodes, claim, volume = test_recovery.nodes, test_recovery.claim, test_recovery.volume

CRD_FILE = REPO / "crds" / "rljob.io_rltrainingjobs.yaml"
RELEASE = "rljob"
ACCOUNT = "rljob-operator"  # the chart's ServiceAccount for release "rljob"
VARIANTS = {
    "defaults": [],
    "all-options": ["-f", str(CI_VALUES / "all-options-values.yaml")],
    "standalone": ["-f", str(CI_VALUES / "standalone-values.yaml")],
}


# --- rendering ---------------------------------------------------------------------------


def test_the_charts_crd_is_the_top_level_crd():
    chart_copy = CHART_CRDS / CRD_FILE.name
    assert chart_copy.read_bytes() == CRD_FILE.read_bytes(), (
        f"{chart_copy} differs from {CRD_FILE}: run `make chart-crds`"
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_helm_lint(variant):
    result = helm(None, "lint", "--strict", str(CHART), *VARIANTS[variant])
    assert "0 chart(s) failed" in result.stdout


@pytest.fixture(scope="module")
def chart_crds(cluster_name, crd):
    """The chart's CRDs (RLTrainingJob and kopf's peering kinds), as `helm install` puts them."""
    out = kubectl(cluster_name, "apply", "--server-side", "-f", str(CHART_CRDS))
    assert out.returncode == 0, out.stderr
    kubectl(cluster_name, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/kopfpeerings.kopf.dev", "crd/clusterkopfpeerings.kopf.dev")  # fmt: skip


@pytest.fixture(scope="module")
def servicemonitor_crd(cluster_name):
    """A stand-in for the Prometheus Operator's ServiceMonitor CRD, for the dry runs."""
    name = SERVICEMONITOR_CRD["metadata"]["name"]
    existed = kubectl(cluster_name, "get", "crd", name).returncode == 0
    if not existed:
        kubectl(cluster_name, "apply", "-f", "-", input=json.dumps(SERVICEMONITOR_CRD))
        kubectl(cluster_name, "wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
    yield
    if not existed:
        kubectl(cluster_name, "delete", "crd", name, "--wait=false")


@pytest.fixture
def other_namespace(core):
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def dry_run(cluster_name, manifests):
    return kubectl(
        cluster_name, "apply", "--dry-run=server", "--validate=strict", "-f", "-",
        input=yaml.safe_dump_all(manifests),
    )  # fmt: skip


@pytest.mark.parametrize("variant", [*VARIANTS, "two-namespaces"])
def test_the_api_server_accepts_every_rendered_variant(
    cluster_name, namespace, other_namespace, chart_crds, servicemonitor_crd, variant
):
    if variant == "two-namespaces":
        values = ["--set", f"watchNamespaces={{{namespace},{other_namespace}}}"]
    else:
        values = [*VARIANTS[variant]]
    if variant == "standalone":  # it watches two namespaces of its own
        values += ["--set", f"watchNamespaces={{{namespace},{other_namespace}}}"]
    manifests = render(*values, namespace=namespace)

    result = dry_run(cluster_name, manifests)

    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert result.stdout.count("(server dry run)") == len(manifests)
    kinds = {m["kind"] for m in manifests}
    if variant == "all-options":
        assert {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering", "PodDisruptionBudget",
                "ServiceMonitor"} <= kinds  # fmt: skip
        assert not kinds & {"Role", "RoleBinding", "KopfPeering"}
    if variant == "two-namespaces":
        roles = [m for m in manifests if m["kind"] in ("Role", "RoleBinding", "KopfPeering")]
        assert sorted(m["metadata"]["namespace"] for m in roles) == sorted(
            [namespace, other_namespace] * 3
        )
    if variant == "standalone":
        assert kinds == {"Deployment"}
        args = find(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--standalone" in args and "--metrics-port=0" in args


def test_the_service_monitor_scrapes_the_metrics_service():
    manifests = render("-f", str(CI_VALUES / "all-options-values.yaml"))
    monitor, service = find(manifests, "ServiceMonitor"), find(manifests, "Service")
    deployment = find(manifests, "Deployment")

    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    metrics_port = next(p for p in container["ports"] if p["name"] == "metrics")
    assert f"--metrics-port={metrics_port['containerPort']}" in container["args"]
    assert (endpoint["interval"], monitor["metadata"]["labels"]["release"]) == ("15s", "prometheus")


def rules(manifests, kind):
    return [(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"]), tuple(r.get("resourceNames", ())))
            for m in manifests if m["kind"] == kind for r in m["rules"]]  # fmt: skip


def test_rbac_grants_no_more_than_the_operator_uses():
    namespaced = render()
    # Cluster-scoped, even in the namespaced mode: reads only.
    assert rules(namespaced, "ClusterRole") == [
        (("",), ("nodes",), ("get", "list", "watch"), ()),
        (("apiextensions.k8s.io",), ("customresourcedefinitions",), ("list", "watch"), ()),
        (("kueue.x-k8s.io",), ("workloadpriorityclasses",), ("list", "watch"), ()),
        (("scheduling.k8s.io",), ("priorityclasses",), ("list", "watch"), ()),
        (("",), ("namespaces",), ("list", "watch"), ()),
    ]
    assert rules(namespaced, "Role") == [
        (("rljob.io",), ("rltrainingjobs",), ("get", "list", "watch", "delete"), ()),
        (("rljob.io",), ("rltrainingjobs/status",), ("patch",), ()),
        (("rljob.io",), ("rltrainingjobs/finalizers",), ("update",), ()),
        (("",), ("pods",), ("get", "list", "watch", "create", "patch", "delete"), ()),
        (("",), ("services", "configmaps"), ("list", "watch", "create"), ()),
        (("",), ("configmaps",), ("get",), ()),  # one found on create: is it the job's own?
        (("",), ("secrets",), ("create",), ()),  # a Ray job's token
        (("networking.k8s.io",), ("networkpolicies",), ("list", "watch", "create"), ()),
        (("scheduling.k8s.io",), ("workloads",), ("list", "watch", "create"), ()),
        (("scheduling.k8s.io",), ("podgroups",), ("create",), ()),
        (("scheduling.k8s.io",), ("podgroups",), ("delete",), ()),
        (("kueue.x-k8s.io",), ("workloads",), ("list", "watch"), ()),
        (("",), ("events",), ("create",), ()),
        (("kopf.dev",), ("kopfpeerings",), ("list", "watch"), ()),
        (("kopf.dev",), ("kopfpeerings",), ("patch",), ("rljob-operator",)),
    ]
    clusterwide = render("--set", "watchAllNamespaces=true")
    assert not rules(clusterwide, "Role")
    assert set(rules(clusterwide, "ClusterRole")) == {
        *rules(namespaced, "Role")[:13],
        (("kopf.dev",), ("clusterkopfpeerings",), ("list", "watch"), ()),
        (("kopf.dev",), ("clusterkopfpeerings",), ("patch",), ("rljob-system-rljob-operator",)),
        *rules(namespaced, "ClusterRole")[:4],
    }


def test_patch_on_kueue_workloads_only_with_the_priority_boost():
    """The priority boost (spec.queueing.priorityBoost) writes an annotation on Kueue's
    Workloads; without kueue.priorityBoost the operator only reads them."""
    patch = (("kueue.x-k8s.io",), ("workloads",), ("patch",), ())
    assert patch not in rules(render(), "Role")
    boosted = rules(render("--set", "kueue.priorityBoost=true"), "Role")
    read = boosted.index((("kueue.x-k8s.io",), ("workloads",), ("list", "watch"), ()))
    assert boosted[read + 1] == patch
    clusterwide = render("--set", "kueue.priorityBoost=true,watchAllNamespaces=true")
    assert patch in rules(clusterwide, "ClusterRole")


def operator_args(manifests):
    return find(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


def test_the_largest_boost_is_the_admins_and_none_without_the_priority_boost():
    assert not any(a.startswith("--max-priority-boost") for a in operator_args(render()))
    assert "--max-priority-boost=99" in operator_args(render("--set", "kueue.priorityBoost=true"))
    lower = render("--set", "kueue.priorityBoost=true,kueue.maxPriorityBoost=9")
    assert "--max-priority-boost=9" in operator_args(lower)


def test_the_floors_under_the_jobs_boost_policies_are_the_admins():
    """A job's author cannot make the operator read its folder and patch its Workload every
    second, nor reach the largest boost at once: the chart passes the administrator's floors."""
    boosted = operator_args(render("--set", "kueue.priorityBoost=true"))
    assert {"--min-boost-interval-seconds=60", "--min-gpu-seconds-per-point=60"} <= set(boosted)
    raised = render("--set", "kueue.priorityBoost=true,kueue.minBoostIntervalSeconds=600,"
                    "kueue.minGpuSecondsPerPoint=3600")  # fmt: skip
    assert {"--min-boost-interval-seconds=600", "--min-gpu-seconds-per-point=3600"} <= set(
        operator_args(raised)
    )
    assert not any(a.startswith("--min-") for a in operator_args(render()))  # no boost at all


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "replicaCount=-1"], "at '/replicaCount': minimum: got -1, want 0"),
        (["--set", "replicas=2"], "additional properties 'replicas' not allowed"),
        (["--set", "image.pullPolicy=Sometimes"], "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"),
        (["--set", "logLevel=trace"], "at '/logLevel': value must be one of 'info', 'debug'"),
        (["--set", "kueue.priorityBoost=yes"], "at '/kueue/priorityBoost': got string, want boolean"),
        (["--set", "kueue.maxPriorityBoost=-1"], "at '/kueue/maxPriorityBoost': minimum: got -1, want 0"),
        (["--set", "kueue.minBoostIntervalSeconds=0"], "at '/kueue/minBoostIntervalSeconds': minimum: got 0, want 1"),
        (["--set", "kueue.minGpuSecondsPerPoint=0"], "at '/kueue/minGpuSecondsPerPoint': minimum: got 0, want 1"),
        (["--set", "checkpointVolumes[0].claimName=ckpts,checkpointVolumes[0].mountPath=relative"], "at '/checkpointVolumes/0/mountPath'"),
        (["--set", "extraVolumeMounts[0].name=v,extraVolumeMounts[0].mountPath=/v,extraVolumeMounts[0].readOnly=false"], "at '/extraVolumeMounts/0/readOnly': value must be true"),
        (["--set", "watchAllNamespaces=true,watchNamespaces={a}"], "watchNamespaces and watchAllNamespaces: true exclude each other"),
        (["--set", "peering.enabled=false,replicaCount=2"], "replicaCount: 2 needs peering.enabled: true"),
        (["--set", "podDisruptionBudget.enabled=true,podDisruptionBudget.minAvailable=1"], "podDisruptionBudget.minAvailable: 1 must be below replicaCount: 1"),
        (["--set", "metrics.port=8081"], "metrics.port and health.port are both 8081"),
    ],
)  # fmt: skip
def test_bad_values_fail_with_a_clear_message(values, message):
    result = helm(None, "template", RELEASE, str(CHART), *values, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


@pytest.fixture
def restricted_namespace(core):
    """A namespace whose Pod Security admission enforces the "restricted" standard."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}  # fmt: skip
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
    )
    yield name
    core.delete_namespace(name)


def operator_pod(manifests, namespace):
    """The pod the chart's Deployment would create (admission judges pods, not Deployments)."""
    template = find(manifests, "Deployment")["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "rljob-operator-psa", "namespace": namespace, "labels": template["metadata"]["labels"]},
            "spec": template["spec"]}  # fmt: skip


@pytest.mark.parametrize("variant", ["defaults", "all-options"])
def test_the_operator_pod_is_admitted_under_the_restricted_pod_security_standard(
    cluster_name, restricted_namespace, variant
):
    manifests = render(*VARIANTS[variant], namespace=restricted_namespace)
    pod = operator_pod(manifests, restricted_namespace)
    # Pods need their ServiceAccount to exist (the ServiceAccount admission plugin).
    kubectl(cluster_name, "apply", "-f", "-", input=json.dumps(find(manifests, "ServiceAccount")))

    admitted = dry_run(cluster_name, [pod])

    assert admitted.returncode == 0, admitted.stderr
    # The namespace does enforce: the same pod without its security settings is refused.
    del pod["spec"]["securityContext"]
    del pod["spec"]["containers"][0]["securityContext"]
    refused = dry_run(cluster_name, [pod])
    assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr


# --- running -----------------------------------------------------------------------------


@pytest.fixture
def release(cluster_name, namespace, chart_crds):
    """`helm install` of the chart into the test's namespace; uninstalled at the end."""
    installed = []

    def install(*values: str) -> list[dict]:
        helm(cluster_name, "install", RELEASE, str(CHART), "--namespace", namespace, *values)
        installed.append(RELEASE)
        return installed_manifests(cluster_name, RELEASE, namespace)

    yield install
    for name in installed:
        helm(cluster_name, "uninstall", name, "--namespace", namespace, check=False)


@pytest.fixture
def operators(cluster_name, namespace, release, tmp_path):
    """Local operator processes run as the chart runs them: its ServiceAccount's token, its
    Deployment's flags and environment. At the end, the jobs are deleted while one still runs."""
    started: list[OperatorProcess] = []

    def run(manifests: list[dict], name: str = "operator", kubeconfig=None) -> OperatorProcess:
        if kubeconfig is None:  # replicas of one release share its ServiceAccount's token
            kubeconfig = service_account_kubeconfig(
                cluster_name, namespace, ACCOUNT, tmp_path / f"{name}.kubeconfig"
            )
        port = free_port()
        flags, env = operator_command(manifests, port)
        process = OperatorProcess(
            kubeconfig, namespace, tmp_path / f"{name}.log", args=flags, POD_ID=name, **env
        )
        started.append(process)
        process.start()
        return process

    yield run
    live = [p for p in started if p.proc and p.proc.poll() is None]
    try:
        if live:
            delete_jobs_and_wait(live[-1])
    finally:
        for process in started:
            process.stop()
            print(f"--- {process.log_path.name} ---\n{process.log()}")


def evict(core, namespace, name):
    core.create_namespaced_pod_eviction(name, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace)))  # fmt: skip


PERMISSION_TROUBLE = re.compile(
    r"[ =]403\b|forbidden|Forbidden|Not enough permissions|lacks a permission"
)


def permission_trouble(log):
    """Log lines about a refused request, or about kopf doing without a permission."""
    return [line for line in log.splitlines() if PERMISSION_TROUBLE.search(line)]


def jobs_in(api_client, namespace):
    listed = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL
    )
    return listed["items"]


def test_the_operator_recovers_a_job_with_exactly_the_charts_rbac_and_names_a_missing_rule(
    api_client, core, cluster_name, namespace, nodes, claim, volume, release, operators
):
    manifests = release("--set", "checkpointVolumes[0].claimName=ckpts",
                        "--set", f"checkpointVolumes[0].mountPath={volume}")  # fmt: skip
    operator = operators(manifests)
    whoami = kubectl(cluster_name, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}",
                     kubeconfig=operator.kubeconfig).stdout  # fmt: skip
    assert whoami == f"system:serviceaccount:{namespace}:{ACCOUNT}"
    assert operator.healthy()

    pods = start(api_client, core, namespace, job_body(nodes, ttlSecondsAfterFinished=0))
    evict(core, namespace, pods[1].metadata.name)

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"EvictionByEvictionAPI"})
    assert not permission_trouble(operator.log())

    # Take one rule away: deleting pods.
    rbac = client.RbacAuthorizationV1Api(api_client)
    role = rbac.read_namespaced_role(ACCOUNT, namespace)
    for rule in role.rules:
        if rule.resources == ["pods"]:
            rule.verbs.remove("delete")
    rbac.replace_namespaced_role(ACCOUNT, namespace, role)
    evict(core, namespace, new_pods[1].metadata.name)

    forbidden = (f'User "system:serviceaccount:{namespace}:{ACCOUNT}" cannot delete resource '
                 f'"pods" in API group "" in the namespace "{namespace}"')  # fmt: skip
    wait_for(
        lambda: forbidden in operator.log(),
        timeout=30,
        what="the operator to report the missing permission",
    )
    assert f"rljob lacks a permission it needs: delete pod {namespace}/grpo-a1-" in operator.log()
    assert not [
        p for p in trainer_pods(core, namespace) if p.metadata.labels[c.LABEL_ATTEMPT] == "2"
    ]

    # `helm upgrade` puts the rule back, and the job carries on.
    helm(cluster_name, "upgrade", RELEASE, str(CHART), "--namespace", namespace, "--reuse-values")
    job, pods = resumed_gang(api_client, core, namespace, attempt=2)
    assert (job["status"]["attempt"], job["status"]["preemptions"]) == (2, 2)

    # Finished, the job goes when its TTL is up: the operator deletes it.
    since = len(operator.log())
    for pod in pods:
        finish(core, namespace, pod.metadata.name, 0)
    wait_for(lambda: not jobs_in(api_client, namespace), what="the finished job to be deleted")
    assert not permission_trouble(operator.log()[since:])


def metric(process, name: str) -> float:
    """The sum of a counter over its labels, from the replica's /metrics."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in process.metrics().splitlines()
        if line.startswith((f"{name} ", f"{name}{{"))
    )


def preemptions(process):
    return metric(process, "rljob_preemptions_total")


def handled(process):
    """Reconcile passes the replica ran (a replica that waits runs none)."""
    return metric(process, "rljob_reconcile_passes_total")


def test_of_two_replicas_one_acts_and_the_other_takes_over_when_it_dies(
    api_client, core, namespace, nodes, claim, volume, release, operators
):
    manifests = release(
        "--set", "replicaCount=2", "--set", "podDisruptionBudget.enabled=true",
        "--set", "peering.lifetime=6",
        "--set", "checkpointVolumes[0].claimName=ckpts", "--set", f"checkpointVolumes[0].mountPath={volume}",
    )  # fmt: skip
    first = operators(manifests, "replica-a")
    wait_for(lambda: "Resuming operations" in first.log(), what="the first replica to act")
    second = operators(manifests, "replica-b", kubeconfig=first.kubeconfig)
    wait_for(
        lambda: set(client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            "kopf.dev", "v1", namespace, "kopfpeerings", ACCOUNT).get("status") or {}) == {"replica-a", "replica-b"},
        what="both replicas in the peering object",
    )  # fmt: skip

    pods = start(api_client, core, namespace, job_body(nodes))
    evict(core, namespace, pods[1].metadata.name)
    job, new_pods = resumed_gang(api_client, core, namespace)

    assert_one_recovery_from_step_20(job, new_pods, {"EvictionByEvictionAPI"})
    assert handled(first) and not handled(second), second.log()
    assert (preemptions(first), preemptions(second)) == (1, 0)
    assert first.healthy() and second.healthy()  # the waiting replica passes its probes too

    first.kill()
    wait_for(
        lambda: "Resuming operations" in second.log(),
        timeout=30,
        what="the second replica to take over",
    )
    evict(core, namespace, new_pods[0].metadata.name)

    job, _ = resumed_gang(api_client, core, namespace, attempt=2)
    assert (job["status"]["attempt"], job["status"]["preemptions"]) == (2, 2)
    assert len(job["status"]["recoveries"]) == 2
    assert sorted(p.metadata.name for p in trainer_pods(core, namespace)) == [
        "grpo-a2-n0",
        "grpo-a2-n1",
    ]
    assert handled(second) and preemptions(second) == 1

    # Each disruption was handled once: a second actor would have posted its events twice.
    def counted():
        reasons = [e.reason for e in core.list_namespaced_event(namespace).items
                   if e.involved_object.kind == c.KIND]  # fmt: skip
        return reasons.count("Preempted"), reasons.count("GangCreated")

    # Events leave the pass on their own thread: the gang can run before the last is posted
    # (make test run 16 listed them in between, under the other lane's load).
    wait_for(lambda: min(a - b for a, b in zip(counted(), (2, 3), strict=True)) >= 0,
             what="the Preempted and GangCreated Events")  # fmt: skip
    assert counted() == (2, 3)
    assert not permission_trouble(first.log() + second.log())


def test_a_cluster_wide_release_recovers_a_job_with_its_cluster_role(
    api_client, core, namespace, nodes, claim, volume, release, operators
):
    """watchAllNamespaces: a ClusterRole, a ClusterKopfPeering, `--all-namespaces`. (Such an
    operator handles jobs in every namespace of the test cluster: only this test's are judged.)"""
    manifests = release(
        "--set", "watchAllNamespaces=true", "--set", "peering.lifetime=6",
        "--set", "checkpointVolumes[0].claimName=ckpts", "--set", f"checkpointVolumes[0].mountPath={volume}",
    )  # fmt: skip
    assert "--all-namespaces" in operator_command(manifests, 0)[0]
    operator = operators(manifests)

    pods = start(api_client, core, namespace, job_body(nodes))
    evict(core, namespace, pods[1].metadata.name)

    job, new_pods = resumed_gang(api_client, core, namespace)
    assert_one_recovery_from_step_20(job, new_pods, {"EvictionByEvictionAPI"})
    peering = client.CustomObjectsApi(api_client).get_cluster_custom_object(
        "kopf.dev", "v1", "clusterkopfpeerings", f"{namespace}-{ACCOUNT}"
    )
    assert set(peering["status"]) == {"operator"}
    trouble = permission_trouble(operator.log())
    assert not [line for line in trouble if namespace in line or "Not enough permissions" in line]


def test_upgrade_and_uninstall_leave_jobs_and_checkpoints_alone(
    api_client, core, cluster_name, namespace, nodes, claim, volume, release, operators
):
    values = ["--set", "checkpointVolumes[0].claimName=ckpts",
              "--set", f"checkpointVolumes[0].mountPath={volume}"]  # fmt: skip
    operator = operators(release(*values))
    pods = start(api_client, core, namespace, job_body(nodes))
    uids = {p.metadata.uid for p in pods}
    checkpoints = file_digests(volume)

    helm(cluster_name, "upgrade", RELEASE, str(CHART), "--namespace", namespace, *values,
         "--set", "replicaCount=2", "--set", "podDisruptionBudget.enabled=true")  # fmt: skip
    assert get_job(api_client, namespace)["status"]["attempt"] == 0
    assert {p.metadata.uid for p in trainer_pods(core, namespace)} == uids
    assert file_digests(volume) == checkpoints

    operator.stop()  # its Deployment goes with the release
    helm(cluster_name, "uninstall", RELEASE, "--namespace", namespace)
    assert kubectl(cluster_name, "get", "serviceaccount", ACCOUNT, "-n", namespace).returncode != 0
    for crd in ("rltrainingjobs.rljob.io", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        assert kubectl(cluster_name, "get", "crd", crd).returncode == 0, (
            f"{crd} went with the release"
        )
    job = get_job(api_client, namespace)
    assert (job["status"]["phase"], job["status"]["attempt"]) == (Phase.RUNNING, 0)
    assert {p.metadata.uid for p in trainer_pods(core, namespace)} == uids
    assert file_digests(volume) == checkpoints
    assert not permission_trouble(operator.log())

    # Installed again, the operator picks the job up where it was: no new attempt.
    operator = operators(release(*values), "reinstalled")
    wait_for(lambda: handled(operator), what="the job to be resumed")
    job = get_job(api_client, namespace)
    assert (job["status"]["phase"], job["status"]["attempt"]) == (Phase.RUNNING, 0)
    assert {p.metadata.uid for p in trainer_pods(core, namespace)} == uids
    assert file_digests(volume) == checkpoints


def test_replicas_started_later_wait_for_the_older_one(monkeypatch):
    """The chart runs replicas without --priority: a later start means a lower priority, so a
    rolling update's new pod waits for the old one instead of taking over."""
    from rljob_operator import operator_cli
    from rljob_operator.cli import build_parser

    # Two starts a millisecond apart, with the random tails least in their favour: the older
    # draws the largest, the later the smallest.
    clock_ns, tails = iter([1_700_000_000_000_000_000, 1_700_000_000_001_000_000]), iter([999, 0])
    monkeypatch.setattr(operator_cli, "time", SimpleNamespace(time_ns=lambda: next(clock_ns)))
    monkeypatch.setattr(operator_cli, "random", SimpleNamespace(randrange=lambda _: next(tails)))
    older = operator_cli.start_priority()
    assert operator_cli.start_priority() < older
    args = build_parser().parse_args(
        ["operator", "-n", "ml", "--peering", "p", "--peering-lifetime", "6"]
    )
    assert (args.peering, args.peering_lifetime, args.priority, args.standalone) == (
        "p",
        6,
        None,
        False,
    )
