"""Dependencies point one way: the trainer and the operator share only rljob_contract, and
the contract imports neither of them (read from the sources, not from what happens to load)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def imported_packages(package_dir: Path) -> set[str]:
    found: set[str] = set()
    for source in package_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(
    ("package_dir", "forbidden"),
    [
        ("trainer_image/rljob_trainer", {"rljob_operator", "rljob_testenv", "rljob_nodeagent"}),
        (
            "contract/rljob_contract",
            {"rljob_operator", "rljob_trainer", "kopf", "kubernetes", "torch"},
        ),
    ],
)
def test_a_package_does_not_import_what_it_must_not(package_dir, forbidden):
    assert imported_packages(REPO / package_dir) & forbidden == set()


def test_the_trainer_and_the_operator_meet_in_the_contract():
    assert "rljob_contract" in imported_packages(REPO / "trainer_image/rljob_trainer")
    assert "rljob_contract" in imported_packages(REPO / "operator/rljob_operator")
