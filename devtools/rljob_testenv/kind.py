"""Real multi-node kind clusters, offline, with rootful podman and the project's own binaries.

No registry is reachable and kind's published node images cannot be pulled, so the node
image is built here with buildah:

- a Debian bookworm root (mmdebstrap) with systemd, iptables, Debian's runc and CNI plugins;
- kind's own base layout (`images/base/files` of the kind module, from the Go module cache):
  the entrypoint, the systemd units of containerd and the kubelet, containerd's config;
- kubeadm, kubelet, kubectl, containerd and crictl from the pinned builds in the cache
  (`binaries`); kubeadm is built here the same way;
- the control-plane images kubeadm asks for (`kubeadm config images list`), made from the
  same binaries and imported into the node's containerd store under the names kubeadm
  expects; CoreDNS and etcd are the project's pinned versions under kubeadm's tags;
- rljob's stand-in for kindnetd (`kind_files/rljob-cni.sh`, a systemd unit on every node):
  ptp/host-local for the node's podCIDR, routes to the other nodes' pod ranges, NAT out.

The image is tagged with a hash of everything that goes into it and built again only when
that changes. What is particular to a host (cgroup v1, a process without CAP_SYS_RESOURCE,
low hard ulimits, no /lib/modules) is handled in kind's and podman's configuration at
cluster creation, never in the image, so the same image runs on a cgroup v2 laptop.

Every wait has a deadline; a missing prerequisite raises KindError naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from . import binaries, images, imagestore

KIND_VERSION = "v0.33.0"
KIND = binaries.GoComponent(
    name="kind",
    module="sigs.k8s.io/kind",
    version=KIND_VERSION,
    commands={"kind": "sigs.k8s.io/kind"},
)
KUBEADM = binaries._kubernetes("kubernetes-kubeadm", ("kubeadm",))

DEBIAN_SUITE = "bookworm"
# What kind's base image installs, less what only rootless or storage e2e tests use; plus
# Debian's runc and CNI plugins (the same the project's real nodes use from the host).
NODE_PACKAGES = (
    "systemd", "conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux",
    "mount", "kmod", "libseccomp2", "pigz", "bash", "ca-certificates", "jq", "procps",
    "mawk", "runc", "containernetworking-plugins",
)  # fmt: skip
PROXY_PACKAGES = ("iptables", "conntrack")
CNI_PLUGINS = ("ptp", "host-local", "loopback", "portmap", "bridge")
# Bump when the way the image is assembled changes (the inputs' hash covers the rest).
BUILD_REVISION = "1"

NODE_IMAGE_REPOSITORY = "localhost/rljob-kind-node"
CONTROL_PLANE_REPOSITORY = "localhost/rljob-kind"  # the images' own names, beside kubeadm's
SHARED_MOUNT = "/rljob/shared"  # where every node sees the shared host folder
CONTAINERD_ROOT = "/var/lib/containerd"  # the node's containerd's root
FILES = Path(__file__).resolve().parent / "kind_files"
CLUSTER_LABEL = "io.x-k8s.io/cluster"
# podman's defaults for a rootful container; a host whose hard limits are lower refuses them.
PODMAN_DEFAULT_ULIMITS = {"nofile": 1048576, "nproc": 4194304}
PODMAN_NPROC_CAP = 32768
CAP_SYS_RESOURCE = 24
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Images the kubelet never garbage-collects (kind marks its preloaded images so).
PINNED = "io.cri-containerd.pinned=pinned"

# Free disk (GiB) under podman's store: for a build of the node image, and for a cluster.
BUILD_DISK_GIB = 6
CLUSTER_DISK_GIB = 3

Say = Callable[[str], None]


class KindError(RuntimeError):
    """A kind cluster or its node image could not be made; the message says what is missing."""


# ------------------------------------------------------------------------------- helpers


def _run(
    cmd: list[str],
    what: str,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command in a process group of its own; on timeout the whole group is killed."""
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, text=True, start_new_session=True,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise KindError(f"{what} did not finish in {timeout:.0f}s") from exc
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and proc.returncode != 0:
        tail = "\n".join((out + err).splitlines()[-30:])
        raise KindError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return result


def state_dir() -> Path:
    return binaries.cache_root() / "kind"


def cluster_dir(name: str) -> Path:
    return state_dir() / "clusters" / name


def kubeconfig_path(name: str) -> Path:
    return cluster_dir(name) / "kubeconfig"


# --------------------------------------------------------------------------- prerequisites


def cgroup_version() -> int:
    """2 on a unified hierarchy, 1 where the v1 controllers are mounted; else KindError."""
    root = CGROUP_ROOT
    if (root / "cgroup.controllers").exists():
        return 2
    if (root / "memory").is_dir() and (root / "cpu").exists():
        return 1
    raise KindError(f"no cgroup hierarchy at {root}: kind's nodes need cgroup v1 or v2 mounted")


def _has_capability(bit: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return True


PROVIDERS = ("podman", "docker")


def provider() -> str:
    """kind's node provider: podman (rootful; what runs here), or docker with
    RLJOB_KIND_PROVIDER=docker (the node image is built the same way and pushed into Docker)."""
    chosen = os.environ.get("RLJOB_KIND_PROVIDER", "podman")
    if chosen not in PROVIDERS:
        raise KindError(f"RLJOB_KIND_PROVIDER={chosen!r}: one of {', '.join(PROVIDERS)}")
    return chosen


def provider_store() -> Path:
    """Where the provider keeps its images and the nodes' volumes (what fills up)."""
    if provider() == "docker":
        result = _run(["docker", "info", "--format", "{{.DockerRootDir}}"], "docker info", 60)
        return Path(result.stdout.strip() or "/var/lib/docker")
    result = _run(["podman", "info", "--format", "{{.Store.GraphRoot}}"], "podman info", 60)
    return Path(result.stdout.strip() or "/var/lib/containers/storage")


def _check_disk(path: Path, gib: float, what: str) -> None:
    probe = path if path.exists() else path.parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free / 2**30
    if free < gib:
        raise KindError(f"{what} needs about {gib:.0f} GiB free under {path}; {free:.1f} GiB are")


def check_host(for_build: bool = False, install: bool = False, say: Say = print) -> None:
    """Raise KindError naming what this machine lacks for a kind cluster (or a node image).

    With `install`, podman is installed with apt-get where missing (as root)."""
    if os.geteuid() != 0:
        raise KindError("the kind node image is built with buildah as root, and podman runs "
                        "rootful here: run as root")  # fmt: skip
    if provider() == "docker":
        answered = shutil.which("docker") and _run(["docker", "info"], "docker info", 60,
                                                   check=False).returncode == 0  # fmt: skip
        if not answered:
            raise KindError("RLJOB_KIND_PROVIDER=docker: no Docker engine answers `docker info`")
    elif not shutil.which("podman"):
        if install and shutil.which("apt-get"):
            say("  installing podman (apt-get install podman)")
            _run(["apt-get", "install", "-y", "podman"], "apt-get install podman", 600,
                 env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))  # fmt: skip
        else:
            raise KindError("podman is not installed: `apt-get install podman` (Debian package)")
    if provider() == "podman":
        version = _run(["podman", "--version"], "podman --version", 30).stdout.split()[-1]
        if int(version.split(".")[0]) < 4:
            raise KindError(f"podman {version} is too old for kind here; 4.0 or newer is needed")
    cgroup_version()
    if for_build:
        missing = [p for p in ("buildah", "mmdebstrap") if not shutil.which(p)]
        if missing:
            raise KindError(
                "building the kind node image needs these Debian packages: " + " ".join(missing)
            )
    store = provider_store()
    if for_build:
        _check_disk(store, BUILD_DISK_GIB, "building the kind node image")
    _check_disk(store, CLUSTER_DISK_GIB, "a kind cluster")


def ensure_kind(say: Say = print) -> Path:
    """kind, built from the Go module proxy into the cache like the other binaries."""
    target = binaries.component_dir(KIND) / "kind"
    if not os.access(target, os.X_OK):
        say(f"  building kind {KIND_VERSION} from the Go module proxy")
        binaries.build(KIND, say)
    return target


# ------------------------------------------------------------------------------ node image


def _kind_base_files() -> Path:
    files = binaries.module_source(KIND) / "images" / "base" / "files"
    if not files.is_dir():
        raise KindError(f"kind's base layout is not in its module source: {files}")
    return files


def _tree_digest(digest: hashlib._Hash, root: Path) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())


# Binaries in the node itself, and where (kind's units expect /usr/bin/kubelet).
NODE_BINARIES = {
    "kubeadm": "/usr/bin", "kubelet": "/usr/bin", "kubectl": "/usr/bin",
    "containerd": "/usr/local/bin", "ctr": "/usr/local/bin",
    "containerd-shim-runc-v2": "/usr/local/bin", "crictl": "/usr/local/bin",
}  # fmt: skip
# The control-plane images: kubeadm's image name (its last path element) -> binary.
STATIC_IMAGES = {
    "kube-apiserver": "kube-apiserver",
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "etcd": "etcd",
    "coredns": "coredns",
}
IMAGE_VERSIONS = {
    "kube-apiserver": binaries.KUBERNETES_VERSION,
    "kube-controller-manager": binaries.KUBERNETES_VERSION,
    "kube-scheduler": binaries.KUBERNETES_VERSION,
    "kube-proxy": binaries.KUBERNETES_VERSION,
    "etcd": binaries.ETCD_VERSION,
    "coredns": binaries.COREDNS_VERSION,
}


def _binary(name: str) -> Path:
    if name == "kubeadm":
        path = binaries.component_dir(KUBEADM) / "kubeadm"
        if not os.access(path, os.X_OK):
            raise KindError("kubeadm is not built: call ensure_binaries() first")
        return path
    return binaries.require(name)


def ensure_binaries(say: Say = print) -> None:
    """Build what the node image needs and the cache lacks (all pinned, from the Go proxy)."""
    binaries.install(say=say, node_binaries=True)
    if not os.access(binaries.component_dir(KUBEADM) / "kubeadm", os.X_OK):
        say(f"  building kubeadm {binaries.KUBERNETES_VERSION} from the Go module proxy")
        binaries.build(KUBEADM, say)


def node_image_key() -> str:
    """A hash of everything the node image is made of."""
    digest = hashlib.sha256()
    digest.update(
        repr((BUILD_REVISION, KIND_VERSION, DEBIAN_SUITE, NODE_PACKAGES, PROXY_PACKAGES,
              CNI_PLUGINS, sorted(IMAGE_VERSIONS.items()))).encode()
    )  # fmt: skip
    for name in sorted({*NODE_BINARIES, *STATIC_IMAGES.values(), "kube-proxy"}):
        stat = _binary(name).stat()
        digest.update(f"{name}:{_binary(name)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    _tree_digest(digest, _kind_base_files())
    _tree_digest(digest, FILES)
    digest.update(images.pause_archive(lambda _: None).read_bytes())
    return digest.hexdigest()[:12]


def node_image_tag() -> str:
    return f"{NODE_IMAGE_REPOSITORY}:{binaries.KUBERNETES_VERSION}-{node_image_key()}"


def _image_exists(ref: str) -> bool:
    """In containers-storage, which buildah builds into and podman runs from."""
    result = _run(["buildah", "inspect", "--type", "image", ref], "buildah inspect", 60,
                  check=False)  # fmt: skip
    return result.returncode == 0


def ensure_node_image(say: Say = print) -> str:
    """The node image's tag in the provider's store, built first if its inputs changed."""
    check_host(for_build=False)
    ensure_binaries(say)
    tag = node_image_tag()
    if not _image_exists(tag):
        _make_node_image(tag, say)
    if provider() == "docker":
        inspected = _run(["docker", "image", "inspect", tag], "docker image inspect", 60,
                         check=False)  # fmt: skip
        if inspected.returncode != 0:
            say(f"  pushing {tag} into Docker")
            _buildah("push", "--quiet", tag, f"docker-daemon:{tag}", what=f"pushing {tag}",
                     timeout=1200)  # fmt: skip
    return tag


def _make_node_image(tag: str, say: Say) -> None:
    check_host(for_build=True)
    started = time.monotonic()
    say(f"  building the kind node image {tag}")
    build_root = state_dir() / "build"
    build_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="node-", dir=build_root))
    try:
        _build_node_image(tag, work, say)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _remove_stale_node_images(keep=tag)
    say(f"  kind node image built in {time.monotonic() - started:.0f}s")


def _remove_stale_node_images(keep: str) -> None:
    listed = _run(
        ["buildah", "images", "--format", "{{.Name}}:{{.Tag}}",
         "--filter", f"reference={NODE_IMAGE_REPOSITORY}"],
        "buildah images", 60, check=False,
    )  # fmt: skip
    for ref in listed.stdout.split():
        if ref != keep:  # an image a running cluster uses stays (rmi refuses it)
            _run(["buildah", "rmi", ref], f"buildah rmi {ref}", 120, check=False)


def _mmdebstrap(target: Path, packages: Iterable[str], what: str) -> None:
    _run(
        ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(packages),
         "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin",
         DEBIAN_SUITE, str(target)],
        f"mmdebstrap ({what})", 1200,
    )  # fmt: skip


def _install(src: Path, dest: Path, mode: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    dest.chmod(mode)


def _build_node_image(tag: str, work: Path, say: Say) -> None:
    rootfs, proxy_root = work / "rootfs", work / "proxy-rootfs"
    say(f"  mmdebstrap: the node's root and kube-proxy's ({DEBIAN_SUITE}), in parallel")
    t0 = time.monotonic()
    errors: list[BaseException] = []

    def proxy_base() -> None:
        try:
            _mmdebstrap(proxy_root, PROXY_PACKAGES, "kube-proxy image")
        except BaseException as exc:
            errors.append(exc)

    side = threading.Thread(target=proxy_base)
    side.start()
    _mmdebstrap(rootfs, NODE_PACKAGES, "node image")
    side.join()
    if errors:
        raise errors[0]
    say(f"    roots made in {time.monotonic() - t0:.0f}s")
    _lay_out_node(rootfs)
    t0 = time.monotonic()
    archives = _control_plane_archives(work, proxy_root, say)
    say(f"    control-plane images made in {time.monotonic() - t0:.0f}s")
    t0 = time.monotonic()
    _import_images(rootfs, work, archives)
    say(f"    imported into the node's containerd store in {time.monotonic() - t0:.0f}s")
    t0 = time.monotonic()
    _commit_rootfs(
        rootfs, work / "node-rootfs.tar", tag,
        ["--env", "container=docker", "--stop-signal", "SIGRTMIN+3",
         "--entrypoint", '["/usr/local/bin/entrypoint", "/sbin/init"]',
         "--label", f"io.rljob.kind.kubernetes={binaries.KUBERNETES_VERSION}"],
    )  # fmt: skip
    say(f"    committed in {time.monotonic() - t0:.0f}s")


def _lay_out_node(root: Path) -> None:
    """kind's base layout, our binaries and files, and the systemd set-up kind's Dockerfile does."""
    base = _kind_base_files()
    for path in sorted(p for p in base.rglob("*") if p.is_file()):
        rel = path.relative_to(base)
        executable = rel.parts[:3] == ("usr", "local", "bin") or rel.parts[:2] == ("kind", "bin")
        _install(path, root / rel, 0o755 if executable else 0o644)
    for name, folder in NODE_BINARIES.items():
        _install(_binary(name), root / folder.lstrip("/") / name, 0o755)
    _install(FILES / "rljob-cni.sh", root / "kind/bin/rljob-cni.sh", 0o755)
    _install(FILES / "rljob-cni.service", root / "etc/systemd/system/rljob-cni.service", 0o644)
    for manifest in ("default-cni.yaml", "default-storage.yaml"):
        _install(FILES / manifest, root / "kind/manifests" / manifest, 0o644)
    (root / "kind/version").write_text(binaries.KUBERNETES_VERSION)
    for folder in (root / "kind", root / "kind/bin", root / "kind/manifests"):
        folder.chmod(0o755)
    # containerd's base OCI spec, as kind's Dockerfile makes it: a hook that mounts the node's
    # product_uuid into each container, and no rlimits of its own.
    spec = json.loads(_run([str(_binary("ctr")), "oci", "spec"], "ctr oci spec", 60).stdout)
    spec.setdefault("hooks", {}).setdefault("createContainer", []).append(
        {"path": "/kind/bin/mount-product-files.sh"}
    )
    spec["process"].pop("rlimits", None)
    (root / "etc/containerd/cri-base.json").write_text(json.dumps(spec, indent=2))
    cni_bin = root / "opt/cni/bin"
    cni_bin.mkdir(parents=True, exist_ok=True)
    for plugin in CNI_PLUGINS:
        (cni_bin / plugin).symlink_to(f"/usr/lib/cni/{plugin}")
    # systemd in a container: what kind's base Dockerfile removes, masks and enables.
    tmpfiles = root / "lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service"
    tmpfiles.unlink(missing_ok=True)
    for pattern in (
        "lib/systemd/system/multi-user.target.wants/*", "etc/systemd/system/*.wants/*",
        "lib/systemd/system/local-fs.target.wants/*",
        "lib/systemd/system/sockets.target.wants/*udev*",
        "lib/systemd/system/sockets.target.wants/*initctl*",
        "lib/systemd/system/basic.target.wants/*",
    ):  # fmt: skip
        for path in root.glob(pattern):
            path.unlink()
    with (root / "etc/systemd/journald.conf").open("a") as journald:
        journald.write("ReadKMsg=no\n")
    init = root / "sbin/init"
    if not init.exists() and not init.is_symlink():
        init.symlink_to("/usr/lib/systemd/systemd")
    chroot = ["chroot", str(root), "systemctl"]
    _run([*chroot, "enable", "kubelet.service", "containerd.service",
          "undo-mount-hacks.service", "rljob-cni.service"], "systemctl enable", 120)  # fmt: skip
    _run([*chroot, "mask", "systemd-binfmt.service"], "systemctl mask", 120)
    (root / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    (root / "etc/machine-id").write_text("")


def _kubeadm_images() -> dict[str, str]:
    """kubeadm's image references at the pinned version, by the last element of their name."""
    listed = _run(
        [str(_binary("kubeadm")), "config", "images", "list",
         "--kubernetes-version", binaries.KUBERNETES_VERSION],
        "kubeadm config images list", 120,
    ).stdout.split()  # fmt: skip
    return {ref.rsplit("/", 1)[-1].split(":")[0]: ref for ref in listed}


def _containerd_sandbox_image() -> str:
    config = (_kind_base_files() / "etc/containerd/config.toml").read_text()
    found = re.search(r'sandbox_image\s*=\s*"([^"]+)"', config)
    if not found:
        raise KindError("kind's containerd config names no sandbox_image")
    return found.group(1)


def _buildah(*args: str, what: str, timeout: float = 600) -> str:
    return _run(["buildah", *args], what, timeout).stdout.strip()


def _save(ref: str, archive: Path) -> Path:
    _buildah("push", "--quiet", "--compression-format", "zstd", ref,
             f"oci-archive:{archive}:{ref}", what=f"saving {ref}")  # fmt: skip
    return archive


def _control_plane_archives(work: Path, proxy_root: Path, say: Say) -> dict[Path, list[str]]:
    """OCI archives of the images kubeadm runs, each with the names it must have in the node."""
    wanted = _kubeadm_images()
    archives: dict[Path, list[str]] = {}
    # The files a static Go binary's image needs besides itself (distroless has the same).
    skeleton = work / "static-skeleton"
    (skeleton / "tmp").mkdir(parents=True)
    (skeleton / "tmp").chmod(0o1777)
    (skeleton / "etc").mkdir()
    (skeleton / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    )
    (skeleton / "etc/group").write_text("root:x:0:\nnobody:x:65534:\n")
    (skeleton / "etc/nsswitch.conf").write_text("hosts: files dns\n")
    for name, binary in STATIC_IMAGES.items():
        own = f"{CONTROL_PLANE_REPOSITORY}/{name}:{IMAGE_VERSIONS[name]}"
        container = _buildah("from", "scratch", what="buildah from scratch")
        try:
            _buildah("add", "--quiet", container, str(skeleton), "/", what="adding /etc, /tmp")
            target = "/coredns" if name == "coredns" else f"/usr/local/bin/{binary}"
            _buildah("copy", "--quiet", "--chmod", "0755", container, str(_binary(binary)), target,
                     what=f"copying {binary}")  # fmt: skip
            config = [
                "--env",
                "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--label",
                f"org.opencontainers.image.version={IMAGE_VERSIONS[name]}",
            ]
            if name == "coredns":
                config += ["--entrypoint", '["/coredns"]']
            _buildah("config", *config, container, what=f"configuring {name}")
            _buildah("commit", "--quiet", "--rm", container, own, what=f"committing {own}")
        except BaseException:
            _run(["buildah", "rm", container], "buildah rm", 60, check=False)
            raise
        archives[_save(own, work / f"{name}.tar")] = [wanted[name], own]
        _run(["buildah", "rmi", own], "buildah rmi", 120, check=False)
    # kube-proxy: Debian with iptables and conntrack; its entrypoint picks the node's backend.
    own = f"{CONTROL_PLANE_REPOSITORY}/kube-proxy:{binaries.KUBERNETES_VERSION}"
    _install(_binary("kube-proxy"), proxy_root / "usr/local/bin/kube-proxy.bin", 0o755)
    _install(FILES / "kube-proxy-wrapper.sh", proxy_root / "usr/local/bin/kube-proxy", 0o755)
    _commit_rootfs(proxy_root, work / "proxy-rootfs.tar", own,
                   ["--env", "PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])  # fmt: skip
    archives[_save(own, work / "kube-proxy.tar")] = [wanted["kube-proxy"], own]
    _run(["buildah", "rmi", own], "buildah rmi", 120, check=False)
    # The sandbox image: the project's own (catatonit), under kubeadm's and containerd's names.
    pause = images.pause_archive(say)
    archives[pause] = [wanted["pause"], _containerd_sandbox_image()]
    return archives


def _import_named(ctr: list[str], archive: Path, names: list[str]) -> None:
    """One archive's image, pinned (the kubelet's image GC never removes it) and under each
    of `names` (the names kubeadm and containerd ask for)."""
    before = set(_run([*ctr, "images", "list", "-q"], "ctr images list", 60).stdout.split())
    _run([*ctr, "images", "import", "--no-unpack", f"--label={PINNED}", str(archive)],
         f"ctr import {archive.name}", 600)  # fmt: skip
    after = set(_run([*ctr, "images", "list", "-q"], "ctr images list", 60).stdout.split())
    imported = sorted(after - before)
    if not imported:
        raise KindError(f"ctr imported no image from {archive.name}")
    for name in names:
        if name not in after:
            _run([*ctr, "images", "tag", "--force", imported[0], name], f"ctr tag {name}", 60)
    for name in {imported[0], *names}:  # a tag is an image record of its own, without labels
        _run([*ctr, "images", "label", name, PINNED], f"ctr label {name}", 60)


def _commit_rootfs(root: Path, tarball: Path, ref: str, config: list[str]) -> None:
    _run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(tarball), "."],
         f"packing {ref}'s root", 600)  # fmt: skip
    container = _buildah("from", "scratch", what="buildah from scratch")
    try:
        _buildah("add", "--quiet", container, str(tarball), "/", what=f"adding {ref}'s root")
        _buildah("config", *config, container, what=f"configuring {ref}")
        _buildah(
            "commit", "--quiet", "--rm", container, ref, what=f"committing {ref}", timeout=1200
        )
    except BaseException:
        _run(["buildah", "rm", container], "buildah rm", 60, check=False)
        raise
    finally:
        tarball.unlink(missing_ok=True)


def _import_images(root: Path, work: Path, archives: dict[Path, list[str]]) -> None:
    """Import the archives into the node's containerd store (its /var/lib/containerd) with a
    containerd of our own on the host: content only, unpacked by the node on first use."""
    store = root / CONTAINERD_ROOT.lstrip("/")
    sockets = Path(tempfile.mkdtemp(prefix="rjkind-", dir="/tmp"))
    try:
        with imagestore.private_containerd(_binary("containerd"), store, work, sockets) as socket:
            ctr = [str(_binary("ctr")), "--address", str(socket), "-n", imagestore.NAMESPACE]
            for archive, names in archives.items():
                _import_named(ctr, archive, names)
            listed = _run([*ctr, "images", "list", "-q"], "ctr images list", 60).stdout.split()
    except imagestore.ImageStoreError as exc:
        raise KindError(f"the node's image store: {exc}") from exc
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    missing = [n for names in archives.values() for n in names if n not in listed]
    if missing:
        raise KindError(f"the node's image store lacks {', '.join(missing)}")
    # Each node's containerd makes its own id at its first start; none is baked in.
    shutil.rmtree(store / "io.containerd.grpc.v1.introspection", ignore_errors=True)


# --------------------------------------------------------------------------------- clusters


def _containers_conf(folder: Path) -> Path:
    """podman's configuration for kind's node containers on this host.

    podman asks runc for open-file and process limits (1048576, 4194304) that a process
    without CAP_SYS_RESOURCE cannot raise its hard limits to, and every node then fails with
    "error setting rlimit type 6/7: operation not permitted". Where CAP_SYS_RESOURCE is
    missing, the limits are this process's hard limits; podman 4.3 runs conmon and runc with
    a process limit of at most PODMAN_NPROC_CAP (measured), so that is the most it can get."""
    lines = ["# Written by rljob_testenv.kind for kind's node containers (CONTAINERS_CONF).",
             "[containers]"]  # fmt: skip
    if not _has_capability(CAP_SYS_RESOURCE):
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        ulimits = {
            "nofile": min(PODMAN_DEFAULT_ULIMITS["nofile"], _finite(nofile)),
            "nproc": min(PODMAN_NPROC_CAP, _finite(nproc)),
        }
        lines.append(
            "default_ulimits = [" + ", ".join(f'"{k}={v}:{v}"' for k, v in ulimits.items()) + "]"
        )
    path = folder / "containers.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def _finite(limit: int) -> int:
    return 1 << 62 if limit == resource.RLIM_INFINITY else limit


def kind_env(folder: Path | None = None) -> dict[str, str]:
    """The environment kind runs in: its provider, and podman's containers.conf of ours."""
    env = dict(os.environ, KIND_EXPERIMENTAL_PROVIDER=provider())
    if folder is not None:
        env["CONTAINERS_CONF"] = str(_containers_conf(folder))
    return env


def host_quirks() -> dict[str, bool]:
    """What this host needs from the cluster's configuration (none of it is in the image)."""
    return {
        "cgroup_v1": cgroup_version() == 1,
        "no_sys_resource": not _has_capability(CAP_SYS_RESOURCE),
    }


def kind_config(
    name: str,
    image: str,
    workers: int,
    shared_dir: Path | None,
    quirks: dict[str, bool],
    containerd_roots: list[Path] | None = None,
) -> dict:
    """kind's Cluster config: a control plane and `workers` workers, every node mounting
    `shared_dir` at SHARED_MOUNT (and its own of `containerd_roots`, in node_names' order, as
    its containerd's root), and the patches this host's quirks need."""
    mounts = [{"hostPath": str(shared_dir), "containerPath": SHARED_MOUNT}] if shared_dir else []
    roles = ["control-plane"] + ["worker"] * workers
    nodes = [{"role": role, "image": image, "extraMounts": [dict(m) for m in mounts]}
             for role in roles]  # fmt: skip
    for node, root in zip(nodes, containerd_roots or [], strict=False):
        node["extraMounts"].append({"hostPath": str(root), "containerPath": CONTAINERD_ROOT})
    config: dict = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": name,
        "nodes": nodes,
    }
    kubelet: dict = {"kind": "KubeletConfiguration"}
    if quirks.get("cgroup_v1"):
        kubelet["failCgroupV1"] = False  # the kubelet refuses cgroup v1 otherwise
    if quirks.get("no_sys_resource"):
        kubelet["oomScoreAdj"] = 0  # may not lower its own OOM score
    if len(kubelet) > 1:
        config["kubeadmConfigPatches"] = [yaml.safe_dump(kubelet)]
    if quirks.get("no_sys_resource"):
        # Without CAP_SYS_RESOURCE runc cannot set a negative oom_score_adj: every pod fails.
        config["containerdConfigPatches"] = [
            '[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true\n'
        ]
    return config


def _ensure_lib_modules(say: Say) -> None:
    """kind's podman provider mounts /lib/modules into every node; podman refuses a missing
    source. An empty folder stands in on a host without one (modules are built in)."""
    modules = Path("/lib/modules")
    if not modules.exists():
        say("  /lib/modules is missing on this host; creating it empty (kind mounts it)")
        modules.mkdir(parents=True)


def _kind(args: list[str], env: dict[str, str], what: str, timeout: float, **kw):
    return _run([str(ensure_kind()), *args], what, timeout, env=env, **kw)


def node_names(name: str, workers: int) -> tuple[str, list[str]]:
    """kind's names for a cluster's control plane and its workers."""
    suffixes = ["" if i == 0 else str(i + 1) for i in range(workers)]
    return f"{name}-control-plane", [f"{name}-worker{s}" for s in suffixes]


def node_image_store(image: str) -> Path:
    """The node image's own containerd root (its control-plane images, not unpacked), copied
    out of the image once."""
    folder = state_dir() / "node-image-stores"
    root = folder / image.rsplit(":", 1)[1]
    if root.is_dir():
        return root
    shutil.rmtree(folder, ignore_errors=True)  # another node image's
    folder.mkdir(parents=True)
    holder = f"rljob-store-{os.getpid()}"
    _run([provider(), "create", "--name", holder, image], "creating a container of the node "
         "image", 120)  # fmt: skip
    try:
        partial = folder / "partial"
        _run([provider(), "cp", f"{holder}:{CONTAINERD_ROOT}", str(partial)],
             "copying the node image's containerd store", 300)  # fmt: skip
        partial.rename(root)
    finally:
        _run([provider(), "rm", "-f", holder], "removing the container", 60, check=False)
    return root


def node_stores(
    name: str, image: str, workers: int, archives: list[Path], say: Say = print
) -> list[Path]:
    """A containerd root for each node (in node_names' order) that holds the node image's
    images and `archives`, unpacked, instead of `kind load image-archive` into every node (the
    trainer's 2.9 GB took 97-194 s a run): one store in the cache (imagestore, made once for
    these archives and this node image), and hard links of it for each node."""
    try:
        store = imagestore.store_for(archives, say, base=node_image_store(image), family="kind")
    except imagestore.ImageStoreError as exc:
        raise KindError(str(exc)) from exc
    control_plane, nodes = node_names(name, workers)
    roots = []
    for node in [control_plane, *nodes]:
        root = cluster_dir(name) / "containerd" / node
        shutil.rmtree(root, ignore_errors=True)
        imagestore.link_into(store, root)
        roots.append(root)
    return roots


def cluster_exists(name: str) -> bool:
    listed = _kind(["get", "clusters"], kind_env(), "kind get clusters", 60).stdout.split()
    return name in listed


def kubectl(name: str, *args: str, timeout: float = 120, check: bool = True,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    cmd = [str(binaries.require("kubectl")), "--kubeconfig", str(kubeconfig_path(name)), *args]
    return _run(cmd, "kubectl " + " ".join(args[:3]), timeout, check=check, stdin=stdin)


def create_cluster(
    name: str,
    workers: int = 2,
    shared_dir: Path | str | None = None,
    say: Say = print,
    timeout: float = 600,
    ready_timeout: float = 300,
    install: bool = False,
    images: Iterable[Path] = (),
) -> Path:
    """Create a kind cluster (a control plane and `workers` workers) and wait until every node
    is Ready and CoreDNS answers; returns its kubeconfig. `shared_dir` is mounted on every node
    at SHARED_MOUNT (stacks.KindStack puts volumes there). Every node starts with the image
    archives `images` (see node_stores). An existing cluster of that name is reused as it is."""
    check_host(install=install, say=say)
    ensure_kind(say)
    image = ensure_node_image(say)
    folder = cluster_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    env = kind_env(folder)
    if cluster_exists(name):
        say(f"  kind cluster {name!r} exists; reusing it")
        _kind(["export", "kubeconfig", "--name", name, "--kubeconfig", str(kubeconfig_path(name))],
              env, "kind export kubeconfig", 60)  # fmt: skip
    else:
        _ensure_lib_modules(say)
        shared = Path(shared_dir).resolve() if shared_dir else None
        if shared:
            shared.mkdir(parents=True, exist_ok=True)
        roots = node_stores(name, image, workers, list(images), say) if images else None
        config = kind_config(name, image, workers, shared, host_quirks(), roots)
        (folder / "kind-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        started = time.monotonic()
        say(f"  kind create cluster {name} ({1 + workers} nodes, {image})")
        try:
            config_file = str(folder / "kind-config.yaml")
            _kind(["create", "cluster", "--name", name, "--config", config_file,
                   "--kubeconfig", str(kubeconfig_path(name)), "--retain"],
                  env, f"kind create cluster {name}", timeout)  # fmt: skip
        except KindError as exc:
            logs = folder / "logs"
            _kind(["export", "logs", str(logs), "--name", name], env, "kind export logs", 120,
                  check=False)  # fmt: skip
            delete_cluster(name, say=say, keep_dir=True)
            raise KindError(f"{exc}\n(the nodes' logs are in {logs})") from exc
        say(f"  kind create cluster took {time.monotonic() - started:.0f}s")
    wait_ready(name, ready_timeout, say)
    return kubeconfig_path(name)


def wait_ready(name: str, timeout: float = 300, say: Say = print) -> None:
    """Every node Ready and CoreDNS available, within `timeout` seconds."""
    started = time.monotonic()
    deadline = started + timeout
    for what, args in (
        ("nodes Ready", ["wait", "--for=condition=Ready", "node", "--all"]),
        ("CoreDNS available", ["-n", "kube-system", "wait", "--for=condition=Available",
                               "deployment/coredns"]),
    ):  # fmt: skip
        left = max(1.0, deadline - time.monotonic())
        result = kubectl(name, *args, f"--timeout={left:.0f}s", timeout=left + 30, check=False)
        if result.returncode != 0:
            nodes = kubectl(name, "get", "nodes", "-o", "wide", check=False).stdout
            pods = kubectl(name, "get", "pods", "-A", "-o", "wide", check=False).stdout
            raise KindError(f"kind cluster {name!r}: not {what} within {timeout:.0f}s: "
                            f"{result.stderr.strip()}\n{nodes}\n{pods}")  # fmt: skip
    say(f"  nodes Ready and CoreDNS available after {time.monotonic() - started:.0f}s")


def _node_containers(name: str) -> list[str]:
    listed = _run([provider(), "ps", "-a", "--format", "{{.Names}}",
                   "--filter", f"label={CLUSTER_LABEL}={name}"],
                  "listing the nodes", 60, check=False)  # fmt: skip
    return listed.stdout.split()


def delete_cluster(
    name: str, say: Say = print, timeout: float = 300, keep_dir: bool = False
) -> None:
    """Delete the cluster's node containers and their volumes, within `timeout` seconds.

    The nodes are stopped first with a short grace (systemd in a node takes podman's default
    10 s to halt, one node after another, under `kind delete`); whatever kind leaves behind
    (containers, the anonymous /var volumes labelled with a node's name) is removed after."""
    folder = cluster_dir(name)
    env = kind_env(folder if folder.is_dir() else None)
    started = time.monotonic()
    nodes = _node_containers(name)
    if nodes:
        _run([provider(), "stop", "--time", "2", *nodes], "stopping the nodes", 120, check=False)
    _kind(["delete", "cluster", "--name", name], env, f"kind delete cluster {name}", timeout,
          check=False)  # fmt: skip
    left = _node_containers(name)
    if left:
        _run([provider(), "rm", "-f", "-v", *left], "removing the nodes", 120, check=False)
    for node in nodes:
        volumes = _run([provider(), "volume", "ls", "-q", "--filter", f"label={node}"],
                       "listing the nodes' volumes", 60, check=False).stdout.split()  # fmt: skip
        if volumes:
            _run([provider(), "volume", "rm", "-f", *volumes], "removing the nodes' volumes", 120,
                 check=False)  # fmt: skip
    if not keep_dir:
        shutil.rmtree(folder, ignore_errors=True)
    say(f"  kind cluster {name} deleted in {time.monotonic() - started:.0f}s")


def shared_dir(name: str) -> Path | None:
    """The host folder a cluster made here mounts on every node, from its kind config."""
    config = cluster_dir(name) / "kind-config.yaml"
    if not config.is_file():
        return None
    for node in yaml.safe_load(config.read_text())["nodes"]:
        for mount in node.get("extraMounts") or []:
            if mount["containerPath"] == SHARED_MOUNT:
                return Path(mount["hostPath"])
    return None


def node_exec(node: str, *cmd: str, timeout: float = 60) -> str:
    """A command run in a node's container; its output."""
    return _run([provider(), "exec", node, *cmd], f"{cmd[0]} on {node}", timeout).stdout


def node_start_program(node: str, program: Path, *args: str) -> None:
    """Copy a static binary into a node and start it there, detached (outliving this call)."""
    target = f"/usr/local/bin/{program.name}"
    _run([provider(), "cp", str(program), f"{node}:{target}"], f"copying {program.name}", 60)
    _run([provider(), "exec", "-d", node, target, *args], f"{program.name} on {node}", 60)


def node_power_off(node: str) -> None:
    """Kill a node's container as a power cut would: its kubelet, containerd and pods at once."""
    _run([provider(), "kill", node], f"killing {node}", 60)


def node_power_on(node: str) -> None:
    """Start a killed node again; its /var (images, kubelet state) was kept."""
    _run([provider(), "start", node], f"starting {node}", 120)


def load_image_archive(
    name: str, archive: Path | str, nodes: Iterable[str] = (), timeout: float = 900
) -> None:
    """Import an image archive (docker or OCI) into the containerd of every node, or of `nodes`
    (kind's node names, e.g. the workers only: a trainer image need not be on the control plane)."""
    args = ["load", "image-archive", str(archive), "--name", name]
    if nodes:
        args += ["--nodes", ",".join(nodes)]
    _kind(args, kind_env(cluster_dir(name)), f"kind load image-archive {Path(archive).name}",
          timeout)  # fmt: skip
