"""Pinned Kubernetes test binaries, built from source through the Go module proxy and cached.

Nothing here downloads a prebuilt binary: every tool is compiled with the local Go
toolchain from a small wrapper module, so the only network this needs is the Go
module proxy. Binaries land in a cache outside the repository, keyed by component
and version, so a second run finds them and returns in well under a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"
# What kind's node image runs (`testenv install --node-binaries`).
CONTAINERD_VERSION = "v2.4.2"
CRI_TOOLS_VERSION = "v1.37.0"
COREDNS_VERSION = "v1.14.7"
# The operators benchmarks/peers.py compares rljob with (`testenv install --peers`).
JOBSET_VERSION = "v0.12.0"
TRAINING_OPERATOR_VERSION = "v1.9.4"
KUEUE_VERSION = "v0.17.0"  # the default: `locate("kueue-manager")`, `kueue.start()`
# Every Kueue release the tests run against (tests/cluster/test_kueue.py runs on each; `install
# --kueue` builds them all). v0.19 turned WaitForPodsReady on by default.
KUEUE_VERSIONS = ("v0.17.0", "v0.19.2")

# Kubernetes' own go.mod points these at ./staging; a wrapper module must pin each
# one to the published v0.X.Y that matches the release.
KUBERNETES_STAGING_MODULES = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
    "streaming",
)

BIN_DIR_ENV = "RLJOB_K8S_BIN_DIR"
CACHE_DIR_ENV = "RLJOB_CACHE_DIR"


class BinariesError(RuntimeError):
    """A binary is missing and could not be built; the message says which and why."""


@dataclass(frozen=True)
class GoComponent:
    """One upstream Go module and the commands we build from it."""

    name: str
    module: str
    version: str
    commands: dict[str, str]  # binary name -> Go package path
    replaces: dict[str, str] = field(default_factory=dict)  # module -> version
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


def _kubernetes(name: str, commands: tuple[str, ...]) -> GoComponent:
    """Commands of the k8s.io/kubernetes release; the control plane and a node's are built apart."""
    minor = KUBERNETES_VERSION.split(".")[1]
    staging_version = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
    version_pkg = "k8s.io/component-base/version"
    return GoComponent(
        name=name,
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        commands={command: f"k8s.io/kubernetes/cmd/{command}" for command in commands},
        replaces={f"k8s.io/{m}": staging_version for m in KUBERNETES_STAGING_MODULES},
        ldflags=(
            f"-X {version_pkg}.gitVersion={KUBERNETES_VERSION}",
            f"-X {version_pkg}.gitMajor=1",
            f"-X {version_pkg}.gitMinor={minor}",
            f"-X {version_pkg}.gitTreeState=clean",
            f"-X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}",
        ),
    )


COMPONENTS: tuple[GoComponent, ...] = (
    GoComponent(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=ETCD_VERSION,
        commands={"etcd": "go.etcd.io/etcd/server/v3"},
    ),
    GoComponent(
        name="kwok",
        module="sigs.k8s.io/kwok",
        version=KWOK_VERSION,
        commands={"kwok": "sigs.k8s.io/kwok/cmd/kwok", "kwokctl": "sigs.k8s.io/kwok/cmd/kwokctl"},
        ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION}",),
    ),
    GoComponent(
        name="helm",
        module="helm.sh/helm/v3",
        version=HELM_VERSION,
        commands={"helm": "helm.sh/helm/v3/cmd/helm"},
        ldflags=(f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",),
    ),
    _kubernetes(
        "kubernetes", ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ),
)

# What kind's node image holds, built only for it (`testenv install --node-binaries`).
NODE_COMPONENTS: tuple[GoComponent, ...] = (
    _kubernetes("kubernetes-node", ("kubelet", "kube-proxy")),
    GoComponent(
        name="containerd",
        module="github.com/containerd/containerd/v2",
        version=CONTAINERD_VERSION,
        commands={
            name: f"github.com/containerd/containerd/v2/cmd/{name}"
            for name in ("containerd", "ctr", "containerd-shim-runc-v2")
        },
        ldflags=(f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}",),
        # Storage drivers this machine has no use for, and whose C libraries it lacks.
        tags=("no_btrfs", "no_devmapper", "no_zfs"),
    ),
    GoComponent(
        name="cri-tools",
        module="sigs.k8s.io/cri-tools",
        version=CRI_TOOLS_VERSION,
        commands={"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"},
    ),
    GoComponent(
        name="coredns",
        module="github.com/coredns/coredns",
        version=COREDNS_VERSION,
        commands={"coredns": "github.com/coredns/coredns"},
    ),
)

# The peers' controllers; their manifests (CRDs, webhooks) come from the same module.
PEER_COMPONENTS: tuple[GoComponent, ...] = (
    GoComponent(
        name="jobset",
        module="sigs.k8s.io/jobset",
        version=JOBSET_VERSION,
        commands={"jobset-manager": "sigs.k8s.io/jobset"},
        ldflags=(f"-X sigs.k8s.io/jobset/pkg/version.GitVersion={JOBSET_VERSION}",),
    ),
    GoComponent(
        name="training-operator",
        module="github.com/kubeflow/training-operator",
        version=TRAINING_OPERATOR_VERSION,
        commands={
            "training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"
        },
    ),
)


def kueue_component(version: str = KUEUE_VERSION) -> GoComponent:
    """Kueue's manager at one release; each version is cached apart (`kueue-<version>`)."""
    return GoComponent(
        name="kueue",
        module="sigs.k8s.io/kueue",
        version=version,
        commands={"kueue-manager": "sigs.k8s.io/kueue/cmd/kueue"},
        ldflags=(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={version}",),
    )


# Kueue, for the tests of jobs admitted, preempted and readmitted by a queue.
KUEUE = kueue_component()
KUEUES: tuple[GoComponent, ...] = tuple(kueue_component(v) for v in KUEUE_VERSIONS)

ALL_BINARIES: tuple[str, ...] = tuple(b for c in COMPONENTS for b in c.commands)
NODE_BINARIES: tuple[str, ...] = tuple(b for c in NODE_COMPONENTS for b in c.commands)
PEER_BINARIES: tuple[str, ...] = tuple(b for c in PEER_COMPONENTS for b in c.commands)


@dataclass(frozen=True)
class LocalGoProgram:
    """A Go program of this repository (its own module), cached by a hash of its sources."""

    name: str
    source: Path

    @property
    def key(self) -> str:
        digest = hashlib.sha256()
        for path in sorted(self.source.glob("*")):
            if path.suffix == ".go" or path.name in ("go.mod", "go.sum"):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
        return f"{self.name}-{digest.hexdigest()[:12]}"


# The real nodes' device plugin, advertising nvidia.com/gpu to each kubelet.
GPU_PLUGIN = LocalGoProgram(
    "rljob-gpu-plugin", Path(__file__).resolve().parents[1] / "rljob_gpuplugin"
)


def cache_root() -> Path:
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rljob"


def component_dir(component: GoComponent) -> Path:
    return cache_root() / "bin" / component.key


def _preinstalled(binary: str) -> Path | None:
    explicit = os.environ.get(BIN_DIR_ENV)
    if not explicit:
        return None
    candidate = Path(explicit) / binary
    return candidate if os.access(candidate, os.X_OK) else None


def locate(binary: str) -> Path | None:
    """Where a binary is, if we already have it: the user's directory first, then the cache.
    A binary built at several versions (Kueue's) is the pinned default one here."""
    if binary == GPU_PLUGIN.name:
        found = _preinstalled(binary)
        cached = cache_root() / "bin" / GPU_PLUGIN.key / binary
        return found or (cached if os.access(cached, os.X_OK) else None)
    for component in (*COMPONENTS, *NODE_COMPONENTS, *PEER_COMPONENTS, KUEUE):
        if binary in component.commands:
            return locate_in(component, binary)
    known = ", ".join((*ALL_BINARIES, *NODE_BINARIES, *PEER_BINARIES, *KUEUE.commands,
                       GPU_PLUGIN.name))  # fmt: skip
    raise KeyError(f"unknown binary {binary!r}; known: {known}")


def locate_in(component: GoComponent, binary: str) -> Path | None:
    """One component's binary at that component's version: the user's directory holds only
    the pinned versions (it cannot say which version its file is), the cache every one."""
    if component.name != "kueue" or component.version == KUEUE_VERSION:
        found = _preinstalled(binary)
        if found:
            return found
    cached = component_dir(component) / binary
    return cached if os.access(cached, os.X_OK) else None


def require(binary: str) -> Path:
    path = locate(binary)
    if path is None:
        raise BinariesError(
            f"{binary} is not installed: run `rljob testenv install` "
            f"(or point {BIN_DIR_ENV} at a directory that holds it)"
        )
    return path


def wrapper_go_mod(component: GoComponent) -> str:
    """A go.mod that requires the upstream module and pins what its own replaces point at."""
    lines = ["module rljob.local/build/" + component.name, "", "go 1.26", ""]
    lines.append(f"require {component.module} {component.version}")
    if component.replaces:
        lines += ["", "replace ("]
        lines += [f"\t{mod} => {mod} {ver}" for mod, ver in sorted(component.replaces.items())]
        lines.append(")")
    return "\n".join(lines) + "\n"


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise BinariesError(
            "the Go toolchain (`go`) is not on PATH; it is needed to build the Kubernetes "
            f"test binaries from source (or set {BIN_DIR_ENV} to prebuilt ones)"
        )
    return go


def _run_with_heartbeat(
    cmd: list[str], cwd: Path, env: dict[str, str], label: str, say: Callable[[str], None]
) -> None:
    """Run a long go command, printing elapsed time and packages compiled every 20 seconds."""
    compiled = 0
    tail: list[str] = []
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    started = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(20):
            say(f"  ... {label}: {time.monotonic() - started:.0f}s, {compiled} packages compiled")

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        compiled += 1
        tail = ([*tail, line.rstrip()])[-30:]
    rc = proc.wait()
    done.set()
    if rc != 0:
        raise BinariesError(f"{label} failed (exit {rc}):\n" + "\n".join(tail))


def build(component: GoComponent, say: Callable[[str], None] = print) -> Path:
    """Compile every command of one component into its cache directory (atomically)."""
    target = component_dir(component)
    if all(os.access(target / b, os.X_OK) for b in component.commands):
        return target
    go = _go()
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false", GOWORK="off")
    with tempfile.TemporaryDirectory(prefix=f"rljob-build-{component.name}-") as tmp:
        work = Path(tmp)
        (work / "go.mod").write_text(wrapper_go_mod(component))
        say(f"  resolving {component.module}@{component.version} through the Go module proxy")
        _run_with_heartbeat(
            [go, "mod", "download", component.module], work, env, f"download {component.name}", say
        )
        staged = work / "out"
        staged.mkdir()
        cmd = [go, "build", "-v", "-trimpath", "-o", str(staged) + "/"]
        cmd += ["-ldflags", " ".join(("-s", "-w", *component.ldflags))]
        if component.tags:
            cmd += ["-tags", ",".join(component.tags)]
        packages = list(component.commands.values())
        say(f"  compiling {', '.join(component.commands)}")
        _run_with_heartbeat(cmd + packages, work, env, f"build {component.name}", say)
        # go build names a binary after the last path element that is not a major version.
        for binary, package in component.commands.items():
            produced = staged / _go_binary_name(package)
            if produced != staged / binary:
                produced.rename(staged / binary)
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(staged, partial)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


def build_local(program: LocalGoProgram, say: Callable[[str], None] = print) -> Path:
    """Compile one of the repository's own Go programs into the cache."""
    target = cache_root() / "bin" / program.key
    if os.access(target / program.name, os.X_OK):
        return target / program.name
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false", GOWORK="off")
    say(f"  compiling {program.name} from {program.source}")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [
        _go(),
        "build",
        "-v",
        "-trimpath",
        "-ldflags",
        "-s -w",
        "-o",
        str(partial / program.name),
    ]
    _run_with_heartbeat([*cmd, "."], program.source, env, f"build {program.name}", say)
    partial.rename(target)
    return target / program.name


def module_source(component: GoComponent) -> Path:
    """Where the Go module cache holds the component's source (fetched if it is not there):
    the manifests and configuration a binary comes with."""
    env = dict(os.environ, GOWORK="off")
    cmd = [_go(), "mod", "download", "-json", f"{component.module}@{component.version}"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise BinariesError(f"go mod download {component.module}: {result.stdout}{result.stderr}")
    return Path(json.loads(result.stdout)["Dir"])


def _go_binary_name(package: str) -> str:
    parts = package.split("/")
    last = parts[-1]
    if len(parts) > 1 and last.startswith("v") and last[1:].isdigit():
        return parts[-2]
    return last


def install(
    names: Iterable[str] | None = None,
    say: Callable[[str], None] = print,
    node_binaries: bool = False,
    peers: bool = False,
    kueue: bool = False,
) -> dict[str, Path]:
    """Make every binary available, building what is neither preinstalled nor cached."""
    components = (
        *COMPONENTS,
        *(NODE_COMPONENTS if node_binaries else ()),
        *(PEER_COMPONENTS if peers else ()),
        *(KUEUES if kueue else ()),
    )
    known = {b for c in components for b in c.commands}
    if node_binaries:
        build_local(GPU_PLUGIN, say)
        known.add(GPU_PLUGIN.name)
    wanted = set(names or known)
    unknown = wanted - known
    if unknown:
        raise BinariesError(f"unknown binaries: {', '.join(sorted(unknown))}")
    todo = [
        c for c in components if any(locate_in(c, b) is None for b in c.commands if b in wanted)
    ]
    for index, component in enumerate(todo, 1):
        started = time.monotonic()
        say(f"[{index}/{len(todo)}] building {component.name} {component.version} from source")
        build(component, say)
        say(f"[{index}/{len(todo)}] {component.name} built in {time.monotonic() - started:.0f}s")
    return {b: require(b) for b in sorted(wanted)}


def ensure(component: GoComponent, binary: str, say: Callable[[str], None] = print) -> Path:
    """One binary of one component at its version, built into the cache if it is not there."""
    found = locate_in(component, binary)
    if found is None:
        started = time.monotonic()
        say(f"building {component.name} {component.version} from source")
        found = build(component, say) / binary
        say(f"{component.name} {component.version} built in {time.monotonic() - started:.0f}s")
    return found


if __name__ == "__main__":  # pragma: no cover - `python -m rljob_testenv.binaries`
    try:
        for name, path in install().items():
            print(f"{name}: {path}")
    except BinariesError as exc:
        sys.exit(f"error: {exc}")
