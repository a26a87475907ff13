"""Runs whose result depends only on their inputs, kept in rljob's cache by those inputs.

The e2e tests and the demos compare a preempted job with the same training run uninterrupted.
That reference run takes from half a minute (rljob's trainer) to two minutes (verl's own
driver) of a two-core machine, and its numbers depend on nothing but its arguments, the source
that computes them and the versions of the libraries it runs on. So each is made once for those
(`inputs_key`) and kept, as Go's test cache keeps a result by its inputs; anything else that
changes makes a new key, and a stale entry can only make a comparison fail, never pass.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from . import binaries

SOURCE_SUFFIXES = (".py", ".yaml")


def inputs_key(parts: object, sources: Iterable[Path] = (), versions: Iterable[str] = ()) -> str:
    """A hash of `parts` (JSON), of every .py and .yaml file under `sources` (files or
    folders, with their paths below them) and of the installed versions of `versions`."""
    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    for source in sources:
        files = sorted(source.rglob("*")) if source.is_dir() else [source]
        for path in files:
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                key.update(str(path.relative_to(source.parent)).encode() + b"\0")
                key.update(path.read_bytes())
    for name in versions:
        key.update(f"{name}=={importlib.metadata.version(name)}".encode())
    return key.hexdigest()[:16]


def run_once(kind: str, key: str, make: Callable[[Path], None]) -> tuple[Path, bool]:
    """The folder `make(folder)` filled for this key: from the cache, or made now (then True).
    `make` fills a fresh folder that becomes the entry only once it has returned, so an entry
    is always whole; where two processes make the same entry at once, the first one kept wins."""
    entry = binaries.cache_root() / "references" / kind / key
    if entry.is_dir():
        return entry, False
    entry.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".making", dir=entry.parent))
    try:
        make(fresh)
        fresh.rename(entry)
    except OSError:
        if not entry.is_dir():
            raise
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return entry, True
