"""The real test nodes' configuration files, rendered without touching the machine."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from rljob_testenv import cluster, nodeconfig, realnodes
from rljob_testenv.nodeconfig import NetworkPlan, NodePlan


def _node(ordinal: int = 0, network: int = 3) -> NodePlan:
    return NodePlan("dev", ordinal, Path(f"/c/nodes/real-node-{ordinal}"), NetworkPlan(network))


def test_nodes_of_one_cluster_share_nothing_on_the_machine() -> None:
    a, b = _node(0), _node(1)
    for attribute in ("name", "netns", "host_veth", "ip", "pod_cidr", "cgroup_root",
                      "containerd_socket", "kubelet_dir", "device_plugin_dir"):  # fmt: skip
        assert getattr(a, attribute) != getattr(b, attribute), attribute
    assert len(a.host_veth) <= 15 and len(a.network.bridge) <= 15  # Linux interface names


def test_addresses_fit_together() -> None:
    node = _node(2, network=7)
    net = node.network
    assert ipaddress.IPv4Address(node.ip) in net.node_subnet
    assert ipaddress.IPv4Address(net.gateway) in net.node_subnet
    pods = ipaddress.IPv4Network(node.pod_cidr)
    assert pods.subnet_of(net.supernet) and not pods.overlaps(net.node_subnet)
    assert not net.supernet.overlaps(NetworkPlan(8).supernet)
    assert not net.supernet.overlaps(ipaddress.IPv4Network(nodeconfig.SERVICE_CIDR))


def test_containerd_config_is_the_nodes_own_and_fits_this_machine() -> None:
    node = _node()
    config = tomllib.loads(nodeconfig.containerd_config(node))
    assert config["version"] == 3
    assert config["grpc"]["address"] == str(node.containerd_socket)
    for path in (config["root"], config["state"]):
        assert path.startswith(str(node.root))
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE here
    assert runtime["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert runtime["cni"]["conf_dir"].startswith(str(node.root))
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]  # a fixed, shared socket
    assert runtime["netns_mounts_under_state_dir"] is True  # not the host's /run/netns


def test_kubelet_config_fits_cgroup_v1_without_cap_sys_resource() -> None:
    node = _node()
    config = nodeconfig.kubelet_config(node)
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["oomScoreAdj"] == 0
    assert config["cgroupRoot"] == node.cgroup_root
    assert config["clusterDNS"] == [node.network.gateway]
    assert config["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"


def test_a_test_node_evicts_only_below_a_fixed_free_disk_not_a_share_of_it() -> None:
    """The kubelet drops every threshold a config leaves out, and a share of a large shared
    disk is gigabytes the disk check before a start would not see."""
    hard = nodeconfig.kubelet_config(_node())["evictionHard"]
    for signal in ("nodefs.available", "imagefs.available"):
        assert hard[signal] == nodeconfig.EVICTION_FREE_DISK == "1Gi"
    assert nodeconfig.EVICTION_FREE_DISK_BYTES == 2**30
    assert {"nodefs.inodesFree", "imagefs.inodesFree", "memory.available"} <= hard.keys()


def test_the_disk_check_leaves_the_kubelets_eviction_threshold_free(tmp_path, monkeypatch):
    """Free disk is a stand-in (the machine's is what it is); the images are real files."""
    image = tmp_path / "image.tar"
    with image.open("wb") as f:
        f.truncate(100 << 20)
    images_and_work = (100 << 20) * 3 + (2 << 30)  # one store, which the nodes share

    def free(bytes_free):
        monkeypatch.setattr(
            realnodes.shutil, "disk_usage", lambda _: SimpleNamespace(free=bytes_free)
        )

    free(images_and_work + nodeconfig.EVICTION_FREE_DISK_BYTES - 1)
    with pytest.raises(realnodes.RealNodeError, match="2 real nodes need about 3 GiB free"):
        realnodes._check_disk(tmp_path, [image], 2)
    free(images_and_work + nodeconfig.EVICTION_FREE_DISK_BYTES)
    realnodes._check_disk(tmp_path, [image], 2)


def test_cni_config_gives_each_node_its_own_pod_range_and_state() -> None:
    a, b = (nodeconfig.cni_config(_node(i)) for i in (0, 1))
    ipam_a, ipam_b = a["plugins"][0]["ipam"], b["plugins"][0]["ipam"]
    assert ipam_a["ranges"] != ipam_b["ranges"]
    assert ipam_a["dataDir"] != ipam_b["dataDir"]


def test_corefile_binds_the_bridge_address_and_serves_the_cluster_domain() -> None:
    text = nodeconfig.corefile(NetworkPlan(4), Path("/c/kubeconfig.yaml"))
    assert f"bind {NetworkPlan(4).gateway}" in text
    assert "kubernetes cluster.local" in text and "/c/kubeconfig.yaml" in text


@pytest.mark.parametrize(
    "args",
    [
        cluster.KWOK_ARGS,
        cluster.KWOK_ARGS + cluster.REAL_NODE_ARGS,
        cluster.REAL_NODE_ARGS + cluster.KWOK_ARGS,
    ],
)
def test_kwokctl_extra_args_put_each_components_first_argument_first(args) -> None:
    rendered = cluster.extra_args(args)
    assert sorted(rendered) == sorted(f"--extra-args={c}={k}={v}" for c, k, v in args)
    components = [a.removeprefix("--extra-args=").split("=", 1)[0] for a in rendered]
    distinct = list(dict.fromkeys(components))
    assert components[: len(distinct)] == distinct
