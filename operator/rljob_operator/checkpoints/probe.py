"""Read-only probes of one checkpoint folder that raise `Incomplete` or `Corrupt` with a reason.

Every probe takes the checkpoint folder and a '/'-separated path relative to it, so that
reasons name files the way a user sees them in the folder (`actor/.metadata is missing`).
Nothing here writes, renames or locks anything.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from rljob_contract import untrusted
from rljob_contract.manifest import safe_relative as safe_relative

from .safetensorscheck import safetensors_problem
from .verdict import Corrupt, Incomplete
from .zipcheck import zip_problem

_MAX_TEXT = 16 * 1024 * 1024  # markers and trackers are small; refuse to slurp a huge file


def join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _inside(folder: Path, rel: str) -> Path:
    """`folder / rel`, refused (corrupt) if a symlink on the way leads outside the folder:
    a checkpoint is judged by its own files, never by what a link points at elsewhere."""
    path = folder / rel
    if rel and not path.resolve().is_relative_to(folder.resolve()):
        raise Corrupt(f"{rel} is a symlink that leads outside the checkpoint folder")
    return path


def _stat(folder: Path, rel: str) -> os.stat_result | None:
    try:
        return os.stat(_inside(folder, rel))
    except (FileNotFoundError, NotADirectoryError):
        return None


def size_of(folder: Path, rel: str) -> int | None:
    """Size of a regular file, None if there is none at `rel`."""
    st = _stat(folder, rel)
    return st.st_size if st is not None and stat.S_ISREG(st.st_mode) else None


def exists(folder: Path, rel: str) -> bool:
    try:
        return _stat(folder, rel) is not None
    except Corrupt:  # a link outside the folder is no part of it
        return False


def is_dir(folder: Path, rel: str) -> bool:
    st = _stat(folder, rel)
    return st is not None and stat.S_ISDIR(st.st_mode)


def nonempty_file(folder: Path, rel: str, why: str = "") -> None:
    """Incomplete unless `rel` is a file with content (an empty one is still being written)."""
    size = size_of(folder, rel)
    suffix = f" ({why})" if why else ""
    if size is None:
        raise Incomplete(f"{rel} is missing{suffix}")
    if size == 0:
        raise Incomplete(f"{rel} is empty: still being written?{suffix}")


def require_dir(folder: Path, rel: str, why: str = "") -> None:
    if not is_dir(folder, rel):
        raise Incomplete(f"{rel}/ is missing" + (f" ({why})" if why else ""))


def names(folder: Path, rel: str) -> list[str]:
    """The entries of the directory `rel` ('' for the folder itself)."""
    if rel and not is_dir(folder, rel):
        raise Incomplete(f"{rel}/ is missing")
    return os.listdir(_inside(folder, rel))


def read_text(folder: Path, rel: str) -> str | None:
    """A small text file's content, None if it does not exist."""
    size = size_of(folder, rel)
    if size is None:
        return None
    if size > _MAX_TEXT:
        raise Corrupt(f"{rel} is {size} bytes, far too large for what it should hold")
    return (folder / rel).read_text(encoding="utf-8", errors="replace")


def open_binary(folder: Path, rel: str) -> BinaryIO:
    """The file for a streaming read: large files are never read whole."""
    return _inside(folder, rel).open("rb")


def read_json(folder: Path, rel: str, *, written_atomically: bool) -> Any:
    """Parse a JSON marker. Unparseable means still being written if its writer writes in
    place, and corrupt if its writer renames it into place (then it was whole once)."""
    text = read_text(folder, rel)
    if text is None:
        raise Incomplete(f"{rel} is missing")
    try:
        return untrusted.loads(text)
    except untrusted.UntrustedJSONError as exc:
        if written_atomically or str(exc) == "nested too deeply":
            raise Corrupt(f"{rel} is not valid JSON: {exc}") from exc
        raise Incomplete(f"{rel} is not complete JSON yet: still being written?") from exc


def intact_zip(folder: Path, rel: str) -> None:
    """Deep check of a torch.save file: its zip end records must be whole."""
    problem = zip_problem(folder / rel)
    if problem:
        raise Corrupt(f"{rel}: {problem}")


def intact_safetensors(folder: Path, rel: str) -> None:
    """Deep check of a safetensors file: its header must account for exactly its size."""
    problem = safetensors_problem(folder / rel)
    if problem:
        raise Corrupt(f"{rel}: {problem}")
