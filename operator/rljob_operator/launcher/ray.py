"""The Ray form of a gang (RLinf, verl): `ray start` on every pod, the driver once, on the head.

Rank 0 starts the Ray head, waits until all `nnodes` Ray nodes have joined, and then runs
the user's command (the driver, which gets the resume switch); every other rank waits for
the head's GCS port and runs `ray start --address=<head> --block`. Both steps are
rljob_podside/ray_node.py, run by the image's Python, since the user's image has Ray but not
rljob. It comes, with the bridge into the frameworks' loops (rljob_ray_bridge.py, and the
framework's hooks beside it), from the
job's launcher ConfigMap (launcher.podside).
"""

from __future__ import annotations

from typing import Any

import rljob_contract

from ..api.spec import JobSpec
from ..frameworks import FRAMEWORKS, framework
from . import in_place, podside
from .identity import JobRef
from .network import gang_network_policy
from .podside import LAUNCHER_DIR

NAME = "ray"  # spec.launcher (launcher.launchers)
TEMP_DIR = "/tmp/ray"  # an emptyDir: Ray's sockets, logs and spilled objects
TEMP_VOLUME = "rljob-ray-tmp"
SHM_VOLUME = "rljob-dshm"  # memory-backed /dev/shm for Ray's object store (and NCCL)
GPU_RESOURCE = "nvidia.com/gpu"
DRIVER_MARKER = f"{TEMP_DIR}/rljob-driver-started"
NOTICE_FILE = f"{TEMP_DIR}/{rljob_contract.NOTICE_FILE_NAME}"  # pod-local: the emptyDir
DRIVER_ON_HEAD = True  # only the head runs the driver; the job ends when the driver does
ALWAYS_BRIDGED = True  # ray_node.py imports rljob_ray_bridge in the driver and every worker
CLUSTER_STATUS = True  # status.ray
# Ray's token authentication (Ray 2.52 and later; older Rays ignore these variables): every
# Ray process of the job reads the job's token from this file, and so must any client.
TOKEN_VOLUME = "rljob-ray-token"
TOKEN_DIR = "/etc/rljob/ray-auth"
TOKEN_KEY = "token"
# From rljob_podside, in every Ray job: the node, and the bridge the driver and every worker
# import (with the rules it keeps as a guest), which loads the framework's hooks beside it.
POD_PROGRAMS = ("ray_node.py", "rljob_ray_bridge.py", podside.GUEST)
NODE_PROGRAM = f"{LAUNCHER_DIR}/ray_node.py"


def pod_programs(spec: JobSpec) -> podside.Programs:
    """What the job's pods need: POD_PROGRAMS, the framework's hooks (frameworks:
    `Framework.bridge`), which rljob_ray_bridge.py installs, and the in-place wrapper where the
    job restarts in place. A job whose framework has no hooks of its own under Ray (custom)
    may run any Ray framework: it gets the hooks of all, each of which applies only inside the
    framework it names."""
    bridge = framework(spec.framework).bridge_for(spec.launcher)
    return in_place.shipped(spec, POD_PROGRAMS + ((bridge,) if bridge else all_hooks()))


def all_hooks() -> podside.Programs:
    """Every framework's hooks into its Ray program."""
    return tuple(sorted({f.bridge for f in FRAMEWORKS.values() if f.launcher == NAME and f.bridge}))


def bridge_unreachable(spec: JobSpec) -> str | None:
    """The driver and every worker import the bridge, whatever the command."""
    return None


def config_map(
    spec: JobSpec, job: str, namespace: str, metadata: dict[str, Any]
) -> dict[str, Any] | None:
    return podside.config_map(job, namespace, metadata, pod_programs(spec))


def network_policy(job: str, namespace: str, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """Ray's ports answer the job's own pods only. Whoever reaches a head's dashboard or GCS
    can submit a Ray job, that is run code inside the training pods, and Ray listens on every
    address of the pod. `kubectl port-forward` reaches the pod from inside it, so the
    dashboard stays at hand."""
    return gang_network_policy(job, namespace, metadata, "ray")


def token_secret_name(job: JobRef, nonce: str) -> str:
    """The job's Ray token's Secret, named with `nonce`: random bits that the pass which makes
    it drew (reconcile.snapshot), which the job's status records only once the Secret is made
    (reconcile.policies.startup). Nobody can make it first: nobody knows the name before it is
    taken."""
    return f"{job.name}-ray-token-{nonce}"


def secret(
    spec: JobSpec, job: JobRef, metadata: dict[str, Any], name: str
) -> dict[str, Any] | None:
    """The Secret of the job's Ray token, named `name`; its value is made when it is created
    (reconcile.act), and it is immutable: nobody can change the token under a running job."""
    if not spec.ray.token_auth:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "immutable": True,
        "metadata": {"name": name, "namespace": job.namespace, **metadata},
        "stringData": {TOKEN_KEY: ""},
    }


def gpus_per_node(spec: JobSpec) -> str | None:
    """The pod's GPU count, which Ray would otherwise detect (wrongly where drivers hide GPUs)."""
    for kind in ("limits", "requests"):
        value = (spec.resources.get(kind) or {}).get(GPU_RESOURCE)
        if value is not None:
            return str(value)
    return None


def start_flags(spec: JobSpec, rank: int) -> list[str]:
    flags = [f"--temp-dir={TEMP_DIR}", "--disable-usage-stats"]
    gpus = gpus_per_node(spec)
    if gpus is not None:
        flags.append(f"--num-gpus={gpus}")
    if rank == 0:
        flags += ["--dashboard-host=0.0.0.0", f"--dashboard-port={spec.ray.dashboard_port}"]
        if spec.ray.client_port is not None:
            flags.append(f"--ray-client-server-port={spec.ray.client_port}")
    return [*flags, *spec.ray.start_args, *(spec.ray.head_start_args if rank == 0 else ())]


def command(spec: JobSpec, rank: int) -> list[str]:
    """The container command of rank `rank`; the head's ends with the driver."""
    launch = [podside.interpreter(spec.entry_command), NODE_PROGRAM]
    if rank == 0:
        return [*launch, "head", *start_flags(spec, rank), "--", *spec.entry_command]
    return [*launch, "worker", *start_flags(spec, rank)]


def head_address(spec: JobSpec, master: str) -> str:
    return f"{master}:{spec.ray.port}"


def env(spec: JobSpec, master: str, rank: int) -> dict[str, str]:
    values = {
        rljob_contract.ENV_RAY_HEAD_ADDRESS: head_address(spec, master),
        rljob_contract.ENV_RAY_NNODES: str(spec.nnodes),
        rljob_contract.ENV_RAY_JOIN_TIMEOUT: str(spec.ray.join_timeout_seconds),
        # Ray captures a node's environment at `ray start`, so the workers it places there
        # see the node's rank (and the framework's own name for it: frameworks/).
        "NODE_RANK": str(rank),
        "NNODES": str(spec.nnodes),
        rljob_contract.ENV_NOTICE_FILE: NOTICE_FILE,
        **podside.bridge_env(spec),
    }
    if spec.ray.token_auth:
        values["RAY_AUTH_MODE"] = "token"
        values["RAY_AUTH_TOKEN_PATH"] = f"{TOKEN_DIR}/{TOKEN_KEY}"
    if rank == 0:
        values["RAY_ADDRESS"] = head_address(spec, master)  # the driver's ray.init() joins it
        values[rljob_contract.ENV_RAY_DRIVER_MARKER] = DRIVER_MARKER
    return values


def readiness_probe(rank: int) -> dict[str, Any] | None:
    """The head is Ready once every Ray node has joined and the driver runs."""
    if rank != 0:
        return None
    return {
        "exec": {"command": ["test", "-e", DRIVER_MARKER]},
        "periodSeconds": 5,
        "failureThreshold": 1,
    }


def container_ports(spec: JobSpec, rank: int) -> list[dict[str, Any]]:
    if rank != 0:
        return []
    return [{"name": name, "containerPort": port} for name, port in spec.ray.ports.items()]


def service_ports(spec: JobSpec) -> dict[str, int]:
    return dict(spec.ray.ports)


def volumes(
    spec: JobSpec, job: JobRef, secret: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`secret`: the token's Secret as the job's status records it. Without one (a render
    that makes no gang: check_template, tests) its name is left empty, which the API server
    refuses: a pod never mounts a Secret whose name anyone could know ahead."""
    programs = pod_programs(spec)
    launcher, launcher_mount = podside.volume_and_mount(job.name, programs)
    volumes = [
        {"name": TEMP_VOLUME, "emptyDir": {}},
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}},
        launcher,
    ]
    mounts = [
        {"name": TEMP_VOLUME, "mountPath": TEMP_DIR},
        {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
        launcher_mount,
    ]
    if spec.ray.token_auth:
        # Kubernetes' default mode (0644): a pod's user need not be root to read it.
        volumes.append({"name": TOKEN_VOLUME, "secret": {"secretName": secret or ""}})
        mounts.append({"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True})
    return volumes, mounts
