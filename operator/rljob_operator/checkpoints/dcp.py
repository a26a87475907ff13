"""Rules for a folder written by torch.distributed.checkpoint (DCP) to a file system.

Every rank writes its shards `__{rank}_{i}.distcp`; only then does the coordinator pickle
the global metadata to `.metadata.tmp` and rename it to `.metadata` (torch's
filesystem.py). So `.metadata` present and no `.metadata.tmp` beside it means the save
finished (quick check).

The deep check reads `.metadata` WITHOUT unpickling it: `pickletools.genops` only
disassembles the opcode stream, so nothing in the file is imported or executed. From the
opcodes it collects every `_StorageInfo(relative_path, offset, length)` and checks that
each named shard exists and is long enough to hold its byte range. A stream that ends
before its STOP opcode is a truncated `.metadata`. The file is streamed, and no single
opcode may carry more than MAX_ARGUMENT_BYTES, so a huge or hostile `.metadata` cannot
exhaust the inspector pod's memory.
"""

from __future__ import annotations

import io
import pickletools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .probe import join, names, nonempty_file, open_binary, safe_relative, size_of
from .verdict import Corrupt, Incomplete

METADATA = ".metadata"
METADATA_TMP = ".metadata.tmp"  # torch's temporary name, renamed to .metadata at the end
SHARD = re.compile(r"__[0-9]+_[0-9]+\.distcp")

_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_INT_OPS = {"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"}
_MEMO_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
_MEMO_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
_IGNORED_OPS = {"FRAME", "PROTO"}
_OPAQUE = object()  # anything that is not a plain string or integer
_STORAGE_KEYS = ("relative_path", "offset", "length")
# DCP's metadata holds many small strings and integers; one argument this large is not it.
MAX_ARGUMENT_BYTES = 16 * 1024 * 1024


def check_dcp(folder: Path, rel: str, deep: bool) -> None:
    """Raise unless the DCP folder `rel` ('' for `folder` itself) holds a finished save."""
    entries = set(names(folder, rel))
    where = f"{rel}/" if rel else ""
    if METADATA_TMP in entries:
        raise Incomplete(f"{where}{METADATA_TMP} is present: .metadata is still being written")
    if METADATA not in entries:
        raise Incomplete(f"{where}{METADATA} is missing: DCP writes it after every rank's shards")
    nonempty_file(folder, join(rel, METADATA))
    if not any(SHARD.fullmatch(name) for name in entries):
        raise Incomplete(f"{where or './'} holds no __R_I.distcp shard files")
    if deep:
        check_references(folder, rel)


def check_references(folder: Path, rel: str) -> None:
    """Every byte range `.metadata` assigns to a shard file must exist in that file."""
    meta = join(rel, METADATA)
    try:
        with open_binary(folder, meta) as stream:
            ends = storage_ends(stream)
    except ValueError as exc:
        raise Corrupt(f"{meta} is not a whole pickle: {exc}") from exc
    if not ends:
        raise Corrupt(f"{meta} names no shard data")
    for name, end in sorted(ends.items()):
        shard = join(rel, safe_relative(name))
        size = size_of(folder, shard)
        if size is None:
            raise Corrupt(f"{shard} is named by {meta} but missing")
        if size < end:
            raise Corrupt(f"{shard} is {size} bytes, {meta} needs {end}: truncated")


class _BoundedReads(io.RawIOBase):
    """A stream whose single reads are refused past MAX_ARGUMENT_BYTES (ValueError)."""

    def __init__(self, source: BinaryIO) -> None:
        self.source = source

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.source.tell()

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_ARGUMENT_BYTES:
            raise ValueError(f"an opcode argument of {size} bytes: not DCP metadata")
        return self.source.read(size)

    def readline(self, size: int | None = -1) -> bytes:
        line = self.source.readline(MAX_ARGUMENT_BYTES + 1)
        if len(line) > MAX_ARGUMENT_BYTES:
            raise ValueError("a line longer than any DCP metadata holds")
        return line


def storage_ends(data: bytes | BinaryIO) -> dict[str, int]:
    """For each shard file named in a DCP `.metadata`, the end of its last byte range."""
    ends: dict[str, int] = {}
    window: list[object] = []
    for token in _scalars(data):
        window.append(token)
        if len(window) > 6:
            del window[0]
        if len(window) == 6 and tuple(window[0::2]) == _STORAGE_KEYS:
            path, offset, length = window[1::2]
            if isinstance(path, str) and isinstance(offset, int) and isinstance(length, int):
                ends[path] = max(ends.get(path, 0), offset + length)
    return ends


def _scalars(data: bytes | BinaryIO) -> Iterator[object]:
    """The strings and integers a pickle pushes, in order, with memo references resolved;
    every other object is `_OPAQUE`. Raises ValueError if the stream is cut short."""
    memo: dict[int, object] = {}
    top: object = _OPAQUE  # the value the last opcode pushed, for MEMOIZE/PUT
    stream = _BoundedReads(io.BytesIO(data) if isinstance(data, bytes) else data)
    for opcode, arg, _ in pickletools.genops(stream):
        name = opcode.name
        if name in _IGNORED_OPS:
            continue
        if name == "MEMOIZE":
            memo[len(memo)] = top
        elif name in _MEMO_PUT_OPS:
            memo[int(arg)] = top  # type: ignore[arg-type]
        elif name in _MEMO_GET_OPS:
            top = memo.get(int(arg), _OPAQUE)  # type: ignore[arg-type]
            yield top
        elif name in _STRING_OPS or (name in _INT_OPS and not isinstance(arg, bool)):
            top = arg
            yield top
        else:
            top = _OPAQUE
            yield top
