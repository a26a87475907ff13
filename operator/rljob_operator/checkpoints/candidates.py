"""Find the step folders (`global_step_N`, or a layout's own `<prefix>N`) in a directory,
newest first, without looking inside them.

Volumes hold more than checkpoints: junk names, plain files, symlinks, folders we may not
read. Only the names are read here (one `os.scandir`), so listing 10,000 folders stays
cheap; what is inside a folder is the layouts' business, and only for the folders that
are actually judged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rljob_contract.steps import STEP_DIR_PREFIX, parse_step

from .errors import CheckpointInputError


@dataclass(frozen=True)
class Candidate:
    step: int
    root: Path  # the resolved directory that holds it
    name: str  # its own name there (a symlink keeps its name, so the step stays readable)
    problem: str | None = None  # why it cannot be a checkpoint at all (not a folder, ...)

    @property
    def path(self) -> Path:
        """Absolute, without a trailing slash; built on demand (10,000 joins cost 0.1 s)."""
        return self.root / self.name


def resolve_directory(directory: str | os.PathLike[str]) -> Path:
    """The directory as an absolute, resolved path; bad input if it is not a readable folder."""
    path = Path(directory)
    if not path.exists():
        raise CheckpointInputError(f"{directory}: no such directory")
    if not path.is_dir():
        raise CheckpointInputError(f"{directory}: not a directory")
    return path.resolve()


def confine(directory: str | os.PathLike[str], within: str | os.PathLike[str]) -> None:
    """Bad input unless `directory`, symlinks resolved, lies inside `within` (the volume):
    a job may only read checkpoints from the volume it was given."""
    resolved, root = Path(directory).resolve(), Path(within).resolve()
    if not resolved.is_relative_to(root):
        raise CheckpointInputError(f"{directory}: resolves to {resolved}, outside {root}")


def scan(directory: str | os.PathLike[str], prefix: str = STEP_DIR_PREFIX) -> list[Candidate]:
    """Every entry named `<prefix>N` in `directory`, newest (highest N) first."""
    root = resolve_directory(directory)
    try:
        with os.scandir(root) as entries:
            named = [
                (step, entry.name, entry)
                for entry in entries
                if (step := parse_step(entry.name, prefix)) is not None
            ]
    except OSError as exc:
        raise CheckpointInputError(f"{directory}: cannot list: {exc.strerror}") from exc
    named.sort(reverse=True)  # names are unique, so the entries themselves are never compared
    return [
        Candidate(step, root, name, _entry_problem(root, e, step, prefix))
        for step, name, e in named
    ]


def candidate_for_folder(
    folder: str | os.PathLike[str], prefix: str = STEP_DIR_PREFIX
) -> Candidate:
    """The candidate for one folder given by the user (a trailing slash is fine)."""
    path = Path(folder)
    name = path.resolve().name if path.name in ("", ".", "..") else path.name
    step = parse_step(name, prefix)
    if step is None:
        raise CheckpointInputError(f"{folder}: not a {prefix}N folder")
    if not path.exists():
        raise CheckpointInputError(f"{folder}: no such directory")
    if not path.is_dir():
        raise CheckpointInputError(f"{folder}: not a directory")
    absolute = Path(os.path.abspath(path))
    return Candidate(step, absolute.parent.resolve(), absolute.name)


def _entry_problem(root: Path, entry: os.DirEntry[str], step: int, prefix: str) -> str | None:
    """Why this entry cannot be a checkpoint folder, or None if it may be one.

    A symlink is followed only when it leads to a folder inside `root` whose own name
    carries the same step: anything else could make a framework resume from a folder
    that is not the checkpoint its name promises.
    """
    try:
        if entry.is_dir(follow_symlinks=False):
            return None
        if not entry.is_symlink():
            return "not a directory"
    except OSError as exc:
        return f"cannot inspect: {exc.strerror}"
    try:
        target = Path(entry.path).resolve(strict=True)
    except (OSError, RuntimeError):
        return "symlink whose target is missing"
    if target == root or not target.is_relative_to(root):
        return f"symlink to {target}, outside {root}: not followed"
    if not target.is_dir():
        return "symlink to something that is not a directory"
    if parse_step(target.name, prefix) != step:
        return f"symlink to {target.name}, which is not step {step}: not followed"
    return None
