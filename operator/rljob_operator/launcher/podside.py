"""Pod-side programs shipped into the user's image: a ConfigMap per job holds them (and the
rljob_contract package they read), and the pods mount it flat at LAUNCHER_DIR, where they
import each other as top-level modules. The ConfigMap's name carries a digest of what it holds,
so an operator that ships new programs makes a new one; the garbage collector removes it with
the job. It is immutable: an edit never reaches the pods that mount it, and what rljob checks
before every gang mounts it (reconcile.act) is what the pods get. The operator reads the
programs as text and never runs them."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import rljob_contract

from ..api.spec import JobSpec

LAUNCHER_DIR = "/etc/rljob/launcher"
LAUNCHER_VOLUME = "rljob-launcher"
Programs = tuple[str, ...]  # file names in rljob_podside
GUEST = "rljob_guest.py"  # the rules every bridge keeps as a guest, which each imports


@cache
def launcher_files(programs: Programs) -> dict[str, str]:
    """Path under LAUNCHER_DIR -> text: the programs and the contract."""
    podside = files("rljob_podside")
    sources = {name: podside / name for name in programs}
    contract_dir = Path(rljob_contract.__file__).parent
    sources.update({f"rljob_contract/{p.name}": p for p in sorted(contract_dir.glob("*.py"))})
    return {path: source.read_text(encoding="utf-8") for path, source in sources.items()}


def bridge_env(spec: JobSpec) -> dict[str, str]:
    """What every bridge reads of the job's spec: whether to save on notice."""
    return {rljob_contract.ENV_SAVE_ON_NOTICE: "true" if spec.save_on_notice else "false"}


def interpreter(entry: tuple[str, ...]) -> str:
    """The Python that runs a pod-side program: the trainer's own where its command names
    one, else python3."""
    return entry[0] if entry and Path(entry[0]).name.startswith("python") else "python3"


def config_map_key(path: str) -> str:
    return path.replace("/", ".")  # a ConfigMap key has no slash


# In the digest too: what an rljob that made them mutable made has another name, so one found
# under this name must be immutable (reconcile.act.not_ours).
FORM = "immutable"


@cache
def config_map_suffix(programs: Programs) -> str:
    digest = hashlib.sha256(f"{FORM}\0".encode())
    for path, text in sorted(launcher_files(programs).items()):
        digest.update(f"{path}\0{text}\0".encode())
    return digest.hexdigest()[:10]


def config_map_name(job: str, programs: Programs) -> str:
    return f"{job}-launcher-{config_map_suffix(programs)}"


def config_map(job: str, namespace: str, metadata: dict[str, Any], programs: Programs):
    """The job's launcher files; `metadata` brings the job's labels and owner reference."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map_name(job, programs), "namespace": namespace, **metadata},
        "immutable": True,
        "data": {config_map_key(path): text for path, text in launcher_files(programs).items()},
    }


def volume_and_mount(job: str, programs: Programs) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ConfigMap's volume, its files under their paths, and its read-only mount."""
    items = [{"key": config_map_key(path), "path": path} for path in launcher_files(programs)]
    volume = {
        "name": LAUNCHER_VOLUME,
        "configMap": {"name": config_map_name(job, programs), "items": items},
    }
    return volume, {"name": LAUNCHER_VOLUME, "mountPath": LAUNCHER_DIR, "readOnly": True}
