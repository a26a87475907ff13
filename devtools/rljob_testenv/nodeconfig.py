"""The configuration files of one real test node, rendered from its plan as plain data.

A real node is a kubelet with its own containerd, its own CNI bridge and kube-proxy, in
a network namespace of its own. Nothing here touches the machine: `realnodes` writes
these files and starts the processes.

Two settings follow from this machine, not from taste:
- the CPU and memory controllers are on cgroup v1, so the kubelet needs
  `failCgroupV1: false` and the cgroupfs driver (there is no systemd to delegate to);
- the process lacks CAP_SYS_RESOURCE, so it may not lower an OOM score: containerd
  needs `restrict_oom_score_adj` (else every sandbox fails with "can't get final
  child's PID from pipe") and the kubelet `oomScoreAdj: 0`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

import tomli_w
import yaml

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
RUNC = "/usr/sbin/runc"
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/rljob-testenv/pause:catatonit"
# Kubernetes' default Service range (kube-apiserver --service-cluster-ip-range).
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
# The most a test node's bridge subnets may number (10.200.0.0/16 to 10.249.0.0/16).
MAX_NETWORKS = 50
# Free disk below which a test node reports DiskPressure and evicts its pods. Absolute, not
# the kubelet's default share of the disk: on a large shared disk, 2% is 5 GiB that the
# disk check before a start did not count, and CI's nodes went under it mid-run.
EVICTION_FREE_DISK = "1Gi"
EVICTION_FREE_DISK_BYTES = 1 << 30


@dataclass(frozen=True)
class NetworkPlan:
    """The addresses of one cluster's real nodes: a host bridge and a /24 of pods per node."""

    index: int  # 0 .. MAX_NETWORKS-1, unique among the clusters on this machine

    @property
    def bridge(self) -> str:
        return f"rljbr{self.index}"

    @property
    def supernet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"10.{200 + self.index}.0.0/16")

    @property
    def node_subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(f"10.{200 + self.index}.0.0/24")

    @property
    def gateway(self) -> str:
        """The host's address on the bridge: where the API server and CoreDNS answer."""
        return str(self.node_subnet.network_address + 1)

    def node_ip(self, ordinal: int) -> str:
        return str(self.node_subnet.network_address + 10 + ordinal)

    def pod_cidr(self, ordinal: int) -> str:
        return f"10.{200 + self.index}.{ordinal + 1}.0/24"


@dataclass(frozen=True)
class NodePlan:
    """Where one real node keeps its files and which addresses it has."""

    cluster: str
    ordinal: int
    root: Path  # the node's own directory
    network: NetworkPlan
    gpus: int = 1

    @property
    def name(self) -> str:
        return f"real-node-{self.ordinal}"

    @property
    def netns(self) -> str:
        return f"rljob-{self.cluster}-{self.ordinal}"

    @property
    def host_veth(self) -> str:
        return f"rljv{self.network.index}n{self.ordinal}"

    @property
    def ip(self) -> str:
        return self.network.node_ip(self.ordinal)

    @property
    def pod_cidr(self) -> str:
        return self.network.pod_cidr(self.ordinal)

    @property
    def cgroup_root(self) -> str:
        """The cgroup every pod of this node lives under, in each v1 hierarchy."""
        return f"/rljob-{self.cluster}-{self.name}"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "run" / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def device_plugin_dir(self) -> Path:
        """Bind-mounted on /var/lib/kubelet/device-plugins inside the node's mount namespace.

        The kubelet's device-plugin socket path is fixed, not under --root-dir: each node
        gets its own mount namespace so that two kubelets never share it.
        """
        return self.root / "device-plugins"

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)


def containerd_config(node: NodePlan) -> str:
    """containerd's config (version 3): every path and socket the node's own."""
    cri_runtime = {
        "restrict_oom_score_adj": True,
        # Pod network namespaces under the node's state dir, not /run/netns: they are mounted
        # in the node's mount namespace and would leave dead files in the host's folder.
        "netns_mounts_under_state_dir": True,
        "cni": {"bin_dirs": [CNI_BIN_DIR], "conf_dir": str(node.path("cni", "net.d"))},
        "containerd": {
            "default_runtime_name": "runc",
            "runtimes": {
                "runc": {
                    "runtime_type": "io.containerd.runc.v2",
                    "options": {"BinaryName": RUNC, "SystemdCgroup": False},
                }
            },
        },
    }
    config = {
        "version": 3,
        "root": str(node.path("containerd", "root")),
        "state": str(node.path("run", "containerd-state")),
        "grpc": {"address": str(node.containerd_socket)},
        "ttrpc": {"address": str(node.containerd_socket) + ".ttrpc"},
        "debug": {"address": ""},
        "metrics": {"address": ""},
        # NRI's socket has one fixed path; two containerds on one machine would share it.
        "disabled_plugins": ["io.containerd.nri.v1.nri"],
        "plugins": {
            "io.containerd.cri.v1.runtime": cri_runtime,
            "io.containerd.cri.v1.images": {
                "snapshotter": "overlayfs",
                "pinned_images": {"sandbox": PAUSE_IMAGE},
            },
            "io.containerd.grpc.v1.cri": {"stream_server_address": node.ip},
        },
    }
    return tomli_w.dumps(config)


def kubelet_config(node: NodePlan) -> dict:
    """KubeletConfiguration for a test node on this machine (see the module docstring)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "healthzBindAddress": node.ip,
        "readOnlyPort": 0,
        # The API server of the test environment presents no client certificate to kubelets;
        # `kubectl logs` and `exec` work because this sandboxed node trusts its network.
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "failCgroupV1": False,
        "oomScoreAdj": 0,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [node.network.gateway],
        "resolvConf": str(node.path("resolv.conf")),
        "podLogsDir": str(node.path("pod-logs")),
        "failSwapOn": False,
        "maxPods": 110,
        # Report often, so that a lost node is noticed within seconds rather than minutes.
        "nodeStatusUpdateFrequency": "4s",
        "nodeStatusReportFrequency": "10s",
        "nodeLeaseDurationSeconds": 12,
        # The host's disk is shared by every node: only evict when it is nearly full, and
        # never collect the images imported by the test environment (there is no registry).
        # Every threshold is named: the kubelet disables the ones a config leaves out.
        "evictionHard": {
            "memory.available": "200Mi",
            "nodefs.available": EVICTION_FREE_DISK,
            "imagefs.available": EVICTION_FREE_DISK,
            "nodefs.inodesFree": "1%",
            "imagefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "imageMinimumGCAge": "876000h",
        "serializeImagePulls": False,
        "staticPodPath": "",
        "shutdownGracePeriod": "0s",
    }


def kube_proxy_config(node: NodePlan, kubeconfig: Path) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node.name,
        "bindAddress": node.ip,
        "healthzBindAddress": f"{node.ip}:10256",
        "metricsBindAddress": f"{node.ip}:10249",
        "clusterCIDR": str(node.network.supernet),
        # Service traffic to a pod on the same bridge would otherwise come back un-NATed.
        "iptables": {"masqueradeAll": True, "syncPeriod": "10s", "minSyncPeriod": "0s"},
        # The network namespace cannot change the host-wide conntrack table size.
        "conntrack": {"maxPerCore": 0, "min": 0},
    }


def cni_config(node: NodePlan) -> dict:
    """A bridge per node, pods addressed from the node's own /24; no NAT between nodes."""
    return {
        "cniVersion": "1.0.0",
        "name": "rljob-testenv",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.path("cni", "ipam")),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


def corefile(network: NetworkPlan, kubeconfig: Path) -> str:
    """CoreDNS on the host's bridge address, serving the cluster's names from the API."""
    return (
        f".:53 {{\n"
        f"    bind {network.gateway}\n"
        f"    errors\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n"
        f"        pods insecure\n"
        f"        fallthrough in-addr.arpa ip6.arpa\n"
        f"    }}\n"
        f"}}\n"
    )


def kubeconfig(server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "testenv", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [
                {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
            ],
            "contexts": [{"name": "testenv", "context": {"cluster": "testenv", "user": user}}],
            "current-context": "testenv",
        }
    )
