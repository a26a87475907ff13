"""What each image installs, and that the operator's pins agree everywhere.

The import direction between the packages is `make lint`'s (import-linter, contracts in
pyproject.toml); these tests check the distributions the images install: their dependency
closures as installed here, and the lock file that the operator image and the dev
environment both install from.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[3]
LOCK = REPO / "requirements" / "operator.lock"


def closure(name: str) -> set[str]:
    """Every distribution that installing `name` brings, by its runtime requirements."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = canonicalize_name(todo.pop())
        if current in seen:
            continue
        seen.add(current)
        for text in distribution(current).requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def pins() -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", LOCK.read_text(), re.M)
    return {canonicalize_name(name): pinned for name, pinned in found}


@pytest.mark.parametrize(
    ("image_distribution", "absent"),
    [
        ("rljob", {"torch", "rljob-trainer", "rljob-devtools", "numpy"}),
        ("rljob-trainer", {"rljob", "kopf", "kubernetes", "rljob-devtools"}),
        ("rljob-contract", {"rljob", "rljob-trainer"}),
    ],
)
def test_an_image_distribution_brings_only_its_own_runtime(image_distribution, absent):
    assert closure(image_distribution) & absent == set()


def test_the_contract_depends_on_nothing():
    assert closure("rljob-contract") == {"rljob-contract"}


def test_every_operator_dependency_is_pinned_in_the_lock_within_its_range():
    locked = pins()
    for name in closure("rljob") - {"rljob", "rljob-contract"}:
        assert name in locked, f"{name} is not in {LOCK.name}: run `make lock`"
    for text in distribution("rljob").requires or []:
        requirement = Requirement(text)
        if requirement.marker is None and canonicalize_name(requirement.name) in locked:
            pinned = locked[canonicalize_name(requirement.name)]
            assert requirement.specifier.contains(pinned), f"{requirement} vs {pinned}"


def test_the_dev_environment_runs_the_operator_on_the_locked_versions():
    for name, pinned in pins().items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue  # pinned for another platform's marker, or only for the image
        assert installed == pinned, f"{name}: {installed} installed, {pinned} locked"


def test_the_operator_image_installs_only_from_the_lock():
    dockerfile = (REPO / "Dockerfile").read_text()
    installs = re.findall(r"pip (?:install|wheel)[^\n]*(?:\\\n[^\n]*)*", dockerfile)
    assert installs, "the Dockerfile installs nothing"
    for command in installs:
        if "pip install" in command:
            assert "--no-index" in command, command
        else:
            assert "--no-deps" in command and (
                "-r requirements/operator.lock" in command or "./contract ." in command
            ), command


SHIPPED_INTO_USER_IMAGES = sorted(
    [
        *(REPO / "operator" / "rljob_podside").glob("*.py"),
        *(REPO / "contract" / "rljob_contract").glob("*.py"),
    ]
)


@pytest.mark.parametrize(
    "source", SHIPPED_INTO_USER_IMAGES, ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_code_shipped_into_users_images_needs_only_the_standard_library_of_python_3_10(source):
    """rljob's launchers mount these files into the user's image and run them on its Python
    (3.10 among them) beside its Ray: an import of anything else, or newer syntax, breaks the
    user's job."""
    import ast
    import sys

    tree = ast.parse(source.read_text(), feature_version=(3, 10))
    shipped = {"rljob_contract", "rljob_ray_bridge", "rljob_guest", "ray_node"}  # side by side
    # The image's own: every image a Ray job runs has Ray, and the bridge into Hugging Face's
    # Trainer imports torch and transformers only inside the Trainer's calls.
    shipped |= {"rljob_hf_bridge.py": {"torch", "transformers"}}.get(source.name, {"ray"})
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
    }
    foreign = {
        name for name in imported if name.split(".")[0] not in sys.stdlib_module_names | shipped
    }
    assert foreign == set()
