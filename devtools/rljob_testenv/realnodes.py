"""Real nodes for the test cluster: a kubelet and a containerd each, in namespaces of their own.

Each node gets a network namespace with one veth on a host bridge (its node IP), a CNI
bridge for its pods, kube-proxy for ClusterIP Services, and a mount namespace, shared
by its containerd, kubelet and device plugin, in which the kubelet's fixed
device-plugin directory is the node's own. Pods of every node route to each other
through the host; CoreDNS runs on the host's bridge address and serves the cluster's
names. Every process, cgroup and namespace is recorded under the cluster's directory,
and `down` removes them all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from . import binaries, imagestore, nodeconfig, pki
from .nodeconfig import NetworkPlan, NodePlan
from .processes import alive, kill_all

CGROUP_V1 = Path("/sys/fs/cgroup")
HOST_DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
# Debian packages a real node needs from the host (`make host-deps` installs them).
HOST_PROGRAMS = {
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "ip": "iproute2",
    "openssl": "openssl",
    "catatonit": "catatonit",
}
REAL_NODE_LABELS = {"rljob.io/testenv": "real", "nvidia.com/gpu.present": "true"}
STATE_FILE = "realnodes.json"


class RealNodeError(RuntimeError):
    """A real node could not be set up or torn down; the message says what and why."""


@dataclass(frozen=True)
class State:
    """What `up` made, written before anything is started so that `down` can undo it all."""

    network: int
    nodes: int
    gpus: int

    def plans(self, cluster_dir: Path, cluster: str) -> list[NodePlan]:
        net = NetworkPlan(self.network)
        return [
            NodePlan(cluster, i, cluster_dir / "nodes" / f"real-node-{i}", net, self.gpus)
            for i in range(self.nodes)
        ]


def missing_host_programs() -> list[str]:
    """The Debian packages whose programs are not on PATH."""
    return sorted({pkg for prog, pkg in HOST_PROGRAMS.items() if not shutil.which(prog)})


def check_host() -> None:
    missing = missing_host_programs()
    if missing:
        raise RealNodeError(
            "real nodes need these Debian packages: "
            + " ".join(missing)
            + " (run `make host-deps`)"
        )
    if not (Path(nodeconfig.CNI_BIN_DIR) / "bridge").exists():
        raise RealNodeError(
            f"no CNI plugins in {nodeconfig.CNI_BIN_DIR}: install containernetworking-plugins"
        )
    if not (CGROUP_V1 / "memory").is_dir():
        raise RealNodeError(
            "real nodes are set up for cgroup v1 hierarchies; none at /sys/fs/cgroup"
        )


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RealNodeError(f"`{' '.join(cmd)}` failed: {result.stderr.strip()}")
    return result


def _free_network_index(cluster_root: Path) -> int:
    used = set()
    for state in cluster_root.glob(f"*/{STATE_FILE}"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            used.add(json.loads(state.read_text())["network"])
    for index in range(nodeconfig.MAX_NETWORKS):
        if index not in used and not Path(f"/sys/class/net/rljbr{index}").exists():
            return index
    raise RealNodeError("no free network for real nodes: run `rljob testenv down` on old clusters")


def _check_disk(cluster_dir: Path, images: list[Path], count: int) -> None:
    """The nodes' image store keeps an image's layers and their unpacked copy (about 3x), which
    the nodes share (imagestore); the jobs' checkpoints and logs take up to 2 GiB, and the
    kubelets evict below their threshold."""
    work = 2 << 30
    need = sum(a.stat().st_size for a in images) * 3 + work + nodeconfig.EVICTION_FREE_DISK_BYTES
    free = shutil.disk_usage(cluster_dir).free
    if free < need:
        raise RealNodeError(
            f"{count} real nodes need about {need / 2**30:.0f} GiB free under {cluster_dir} for "
            f"their images, and {free / 2**30:.0f} GiB are"
        )


def read_state(cluster_dir: Path) -> State | None:
    try:
        return State(**json.loads((cluster_dir / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


# ---------------------------------------------------------------------------- network


def _setup_bridge(net: NetworkPlan) -> None:
    if not Path(f"/sys/class/net/{net.bridge}").exists():
        _run("ip", "link", "add", net.bridge, "type", "bridge")
    _run("ip", "addr", "replace", f"{net.gateway}/{net.node_subnet.prefixlen}", "dev", net.bridge)
    _run("ip", "link", "set", net.bridge, "up")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def _setup_node_network(node: NodePlan) -> None:
    ns = node.netns
    _run("ip", "netns", "add", ns)
    _run("ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _run("ip", "link", "set", node.host_veth, "master", node.network.bridge, "up")
    prefix = node.network.node_subnet.prefixlen
    _run("ip", "-n", ns, "addr", "add", f"{node.ip}/{prefix}", "dev", "eth0")
    _run("ip", "-n", ns, "link", "set", "lo", "up")
    _run("ip", "-n", ns, "link", "set", "eth0", "up")
    _run("ip", "-n", ns, "route", "add", "default", "via", node.network.gateway)
    _run("ip", "route", "replace", node.pod_cidr, "via", node.ip)
    # Forwarding is needed; bridged traffic through iptables only helps (kube-proxy's
    # masqueradeAll covers a kernel without br_netfilter).
    for sysctl, required in (("net/ipv4/ip_forward", True),
                             ("net/bridge/bridge-nf-call-iptables", False)):  # fmt: skip
        _run("nsenter", f"--net=/run/netns/{ns}", "sh", "-c",
             f"echo 1 > /proc/sys/{sysctl}", check=required)  # fmt: skip


def _teardown_network(plans: list[NodePlan], net: NetworkPlan) -> None:
    for node in plans:
        _run("ip", "route", "del", node.pod_cidr, check=False)
        _run("ip", "netns", "del", node.netns, check=False)
        _run("ip", "link", "del", node.host_veth, check=False)
    _run("ip", "link", "del", net.bridge, check=False)


# ---------------------------------------------------------------------------- processes


def _spawn(node_or_dir: Path, name: str, cmd: list[str]) -> int:
    """Start one long-running process, its output in logs/<name>.log, its pid in pids/."""
    (node_or_dir / "logs").mkdir(parents=True, exist_ok=True)
    (node_or_dir / "pids").mkdir(parents=True, exist_ok=True)
    log = (node_or_dir / "logs" / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    (node_or_dir / "pids" / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def _in_node(holder: int, cmd: list[str]) -> list[str]:
    return ["nsenter", f"--target={holder}", "--mount", "--net", "--", *cmd]


def _wait(predicate: Callable[[], bool], timeout: float, what: str, logs: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    tail = ""
    if logs and logs.exists():
        tail = "\n" + "\n".join(logs.read_text(errors="replace").splitlines()[-20:])
    raise RealNodeError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")


def _cgroup_dirs(node: NodePlan, v1_only: bool = False) -> list[Path]:
    """The node's cgroup in each hierarchy: the v1 ones, and the hybrid layout's v2 one
    (`unified`), where runc makes a pod's cgroups as well."""
    markers = ("tasks",) if v1_only else ("tasks", "cgroup.procs")
    return [
        hierarchy / node.cgroup_root.lstrip("/")
        for hierarchy in sorted(CGROUP_V1.iterdir())
        if hierarchy.is_dir()
        and not hierarchy.is_symlink()
        and any((hierarchy / marker).exists() for marker in markers)
    ]


def _make_cgroups(node: NodePlan) -> None:
    for path in _cgroup_dirs(node, v1_only=True):
        path.mkdir(exist_ok=True)
        if path.parent.name == "cpuset" or (path.parent / "cpuset.cpus").exists():
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((path.parent / knob).read_text())


def _issue_node_certs(cluster_pki: Path, node: NodePlan, server: str) -> None:
    certs = node.path("pki")
    certs.mkdir(parents=True, exist_ok=True)
    for ca_file in ("ca.crt", "ca.key"):
        shutil.copy(cluster_pki / ca_file, certs / ca_file)
    kubelet_cert, kubelet_key = pki.issue(
        certs, "kubelet", f"/O=system:nodes/CN=system:node:{node.name}"
    )
    proxy_cert, proxy_key = pki.issue(certs, "kube-proxy", "/CN=system:kube-proxy")
    (certs / "ca.key").unlink()
    ca = certs / "ca.crt"
    node.path("kubelet.kubeconfig").write_text(
        nodeconfig.kubeconfig(server, ca, kubelet_cert, kubelet_key, f"system:node:{node.name}")
    )
    node.path("kube-proxy.kubeconfig").write_text(
        nodeconfig.kubeconfig(server, ca, proxy_cert, proxy_key, "system:kube-proxy")
    )


def _write_node_files(node: NodePlan) -> None:
    for sub in ("cni/net.d", "cni/ipam", "containerd/root", "run", "pod-logs", "kubelet"):
        node.path(*sub.split("/")).mkdir(parents=True, exist_ok=True)
    node.device_plugin_dir.mkdir(parents=True, exist_ok=True)
    node.path("containerd.toml").write_text(nodeconfig.containerd_config(node))
    node.path("kubelet.yaml").write_text(yaml.safe_dump(nodeconfig.kubelet_config(node)))
    node.path("kube-proxy.yaml").write_text(
        yaml.safe_dump(nodeconfig.kube_proxy_config(node, node.path("kube-proxy.kubeconfig")))
    )
    node.path("cni", "net.d", "10-rljob.conflist").write_text(
        json.dumps(nodeconfig.cni_config(node), indent=2)
    )
    node.path("resolv.conf").write_text("")


def _start_runtime(node: NodePlan) -> int:
    """The node's mount namespace and its containerd; returns the namespace holder's pid."""
    HOST_DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
    bind = f"mount --bind {node.device_plugin_dir} {HOST_DEVICE_PLUGIN_DIR}"
    holder = _spawn(
        node.root,
        "namespace",
        [
            "unshare", "--mount", "--propagation", "slave", "--",
            "nsenter", f"--net=/run/netns/{node.netns}", "--",
            "sh", "-c",
            f"{bind} && exec sleep infinity",
        ],
    )  # fmt: skip
    _wait(
        lambda: _mounted_in(holder, HOST_DEVICE_PLUGIN_DIR),
        10,
        f"{node.name}'s mount namespace",
        node.path("logs", "namespace.log"),
    )
    containerd = binaries.require("containerd")
    node.containerd_socket.unlink(missing_ok=True)  # a stopped node's, left behind
    env_path = f"{containerd.parent}:{os.environ.get('PATH', '')}"  # the shim sits beside it
    _spawn(
        node.root,
        "containerd",
        _in_node(holder, ["env", f"PATH={env_path}", str(containerd), "--config",
                          str(node.path("containerd.toml"))]),
    )  # fmt: skip
    _wait(
        node.containerd_socket.exists,
        30,
        f"{node.name}'s containerd",
        node.path("logs", "containerd.log"),
    )
    return holder


def _import_images(node: NodePlan, images: list[Path]) -> None:
    for archive in images:
        _run(*ctr(node), "images", "import", str(archive))


def _start_kubelet(node: NodePlan, holder: int) -> None:
    """The kubelet, the device plugin and kube-proxy, once the node's images are in."""
    labels = ",".join(f"{k}={v}" for k, v in REAL_NODE_LABELS.items())
    _spawn(
        node.root,
        "kubelet",
        _in_node(
            holder,
            [
                str(binaries.require("kubelet")),
                f"--config={node.path('kubelet.yaml')}",
                f"--kubeconfig={node.path('kubelet.kubeconfig')}",
                f"--hostname-override={node.name}",
                f"--node-ip={node.ip}",
                f"--root-dir={node.kubelet_dir}",
                f"--cert-dir={node.path('pki')}",
                f"--node-labels={labels}",
                "--v=2",
            ],
        ),
    )
    gpu_plugin = binaries.locate("rljob-gpu-plugin")
    if gpu_plugin and node.gpus:
        _spawn(
            node.root,
            "gpu-plugin",
            _in_node(holder, [str(gpu_plugin), f"--devices={node.gpus}"]),
        )
    _spawn(
        node.root,
        "kube-proxy",
        _in_node(
            holder,
            [str(binaries.require("kube-proxy")), f"--config={node.path('kube-proxy.yaml')}"],
        ),
    )


def ctr(node: NodePlan) -> list[str]:
    """The ctr command line for this node's containerd."""
    return imagestore.ctr(node.containerd_socket)


def _mounted_in(pid: int, path: Path) -> bool:
    try:
        mounts = Path(f"/proc/{pid}/mountinfo").read_text()
    except OSError:
        return False
    return any(line.split()[4] == str(path) for line in mounts.splitlines())


def up(
    cluster: str,
    cluster_dir: Path,
    kubeconfig: Path,
    count: int,
    gpus: int,
    images: list[Path],
    say: Callable[[str], None] = print,
) -> list[NodePlan]:
    """Add `count` real nodes to the cluster (already running, and `check_host` passed before
    it was started) and return their plans."""
    existing = read_state(cluster_dir)
    if existing:
        plans = existing.plans(cluster_dir, cluster)
        for node in plans:
            if not alive(_recorded_pid(node, "kubelet")):
                say(f"  {node.name} is down: starting it again")
                _start_again(node)
        return plans
    _check_disk(cluster_dir, images, count)
    state = State(network=_free_network_index(cluster_dir.parent), nodes=count, gpus=gpus)
    (cluster_dir / STATE_FILE).write_text(json.dumps(state.__dict__))
    plans = state.plans(cluster_dir, cluster)
    net = plans[0].network
    port = urlsplit(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]).port
    server = f"https://{net.gateway}:{port}"
    try:
        store = imagestore.store_for(images, say)
    except imagestore.ImageStoreError as exc:
        raise RealNodeError(f"the nodes' image store could not be made: {exc}") from exc
    _setup_bridge(net)
    _start_coredns(cluster_dir, net)
    holders = {}
    for node in plans:
        say(f"  starting {node.name} ({node.ip}, pods {node.pod_cidr})")
        _setup_node_network(node)
        _make_cgroups(node)
        _issue_node_certs(cluster_dir / "pki", node, server)
        _write_node_files(node)
        imagestore.link_into(store, node.path("containerd", "root"))
        holders[node.name] = _start_runtime(node)
    for node in plans:
        _start_kubelet(node, holders[node.name])
    return plans


def _start_coredns(cluster_dir: Path, net: NetworkPlan) -> None:
    dns_dir = cluster_dir / "coredns"
    dns_dir.mkdir(parents=True, exist_ok=True)
    (dns_dir / "Corefile").write_text(nodeconfig.corefile(net, cluster_dir / "kubeconfig.yaml"))
    _spawn(
        dns_dir, "coredns", [str(binaries.require("coredns")), "-conf", str(dns_dir / "Corefile")]
    )


# ---------------------------------------------------------------------------- tear-down


def _pids_under(root: Path) -> list[int]:
    """The pids recorded in root/pids and root/*/pids (never a walk of containerd's store)."""
    pids = []
    for pidfile in [*root.glob("pids/*.pid"), *root.glob("*/pids/*.pid")]:
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(pidfile.read_text()))
    return pids


def _processes_of(plans: list[NodePlan]) -> list[int]:
    """Every process started for these nodes, found by the node folders in their command
    lines: the daemons (also one whose pid file was lost) and containerd's shims, which
    detach from it and name its socket."""
    roots = tuple(str(p.root) + "/" for p in plans)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(root in arg for arg in argv for root in roots):
            found.append(int(proc.name))
    return found


def _cgroup_pids(plans: list[NodePlan]) -> list[int]:
    pids = set()
    for node in plans:
        for top in _cgroup_dirs(node):
            for procs in top.glob("**/cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(x) for x in procs.read_text().split())
    return sorted(pids)


def _kill_pods(plans: list[NodePlan], gentle: bool) -> None:
    for _ in range(3):  # a pod's processes may fork while we kill them
        kill_all(_cgroup_pids(plans), gentle=gentle)


def _remove_cgroups(plans: list[NodePlan]) -> None:
    for node in plans:
        for top in _cgroup_dirs(node):
            if not top.exists():
                continue
            for path in sorted(top.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    path.rmdir()


def _recorded_pid(node: NodePlan, name: str) -> int:
    try:
        return int((node.root / "pids" / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return 0


NODE_DAEMONS = ("kubelet", "kube-proxy", "gpu-plugin", "containerd", "namespace")


def _stop_daemons(node: NodePlan) -> None:
    pids = [_recorded_pid(node, name) for name in NODE_DAEMONS]
    kill_all([pid for pid in pids if pid] + _processes_of([node]), gentle=False)


def _start_again(node: NodePlan) -> None:
    _stop_daemons(node)  # whatever is left of it: its containerd holds the store's lock
    _start_kubelet(node, _start_runtime(node))


def node_plan(cluster: str, cluster_dir: Path, node_name: str) -> NodePlan:
    state = read_state(cluster_dir)
    plans = [p for p in (state.plans(cluster_dir, cluster) if state else []) if p.name == node_name]
    if not plans:
        raise RealNodeError(f"no real node {node_name!r} in cluster {cluster!r}")
    return plans[0]


def power_on(cluster: str, cluster_dir: Path, node_name: str) -> None:
    """Start a node that was stopped (power_off) again: its images are still in its store."""
    _start_again(node_plan(cluster, cluster_dir, node_name))


def load_images(cluster: str, cluster_dir: Path, images: list[Path]) -> None:
    """Import images into every running real node (after a rebuild), all nodes at once."""
    state = read_state(cluster_dir)
    if state is None:
        raise RealNodeError(f"cluster {cluster!r} has no real nodes")
    plans = state.plans(cluster_dir, cluster)
    with ThreadPoolExecutor(len(plans)) as pool:
        list(pool.map(lambda node: _import_images(node, images), plans))


def power_off(cluster: str, cluster_dir: Path, node_name: str) -> None:
    """Stop one node as a power cut would: its kubelet, containerd, kube-proxy and device
    plugin, by PID, and every process of its pods. Its network namespace stays, dead."""
    node = node_plan(cluster, cluster_dir, node_name)
    plans = [node]
    _stop_daemons(node)
    _kill_pods(plans, gentle=False)


def down(cluster: str, cluster_dir: Path, say: Callable[[str], None] = print) -> None:
    """Stop every process of the cluster's real nodes and remove what they made on the host."""
    state = read_state(cluster_dir)
    if state is None:
        return
    plans = state.plans(cluster_dir, cluster)
    kill_all(_pids_under(cluster_dir / "nodes") + _pids_under(cluster_dir / "coredns"))
    kill_all(_processes_of(plans))
    _kill_pods(plans, gentle=True)
    _remove_cgroups(plans)
    _teardown_network(plans, NetworkPlan(state.network))
    others = [p for p in cluster_dir.parent.glob(f"*/{STATE_FILE}") if p.parent != cluster_dir]
    if not others:  # removing it would unmount it under another cluster's nodes
        with contextlib.suppress(OSError):
            HOST_DEVICE_PLUGIN_DIR.rmdir()
            HOST_DEVICE_PLUGIN_DIR.parent.rmdir()
    leftover = [p for p in _cgroup_pids(plans) if alive(p)]
    if leftover:
        say(f"warning: processes still in the real nodes' cgroups: {leftover}")
    (cluster_dir / STATE_FILE).unlink(missing_ok=True)
    say(f"real nodes of {cluster!r} are gone")
