"""Is a `.pt` file whole? torch.save writes a zip archive whose end records come last, so a
file cut short by preemption has none at its end. Reading a few kilobytes at the tail
answers without torch and without loading the tensors."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record, 22 bytes
_EOCD_SIG = b"PK\x05\x06"
_LOCATOR = struct.Struct("<4sLQL")  # zip64 end of central directory locator, 20 bytes
_LOCATOR_SIG = b"PK\x06\x07"
_EOCD64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record, 56 bytes
_EOCD64_SIG = b"PK\x06\x06"
_CENTRAL_SIG = b"PK\x01\x02"
_MAX_COMMENT = 0xFFFF


def zip_problem(path: Path) -> str | None:
    """What is wrong with the zip archive at `path`, or None if its end records are whole."""
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        if size < _EOCD.size:
            return f"{size} bytes, too short for a zip archive: truncated"
        tail_len = min(size, _EOCD.size + _MAX_COMMENT)
        fh.seek(size - tail_len)
        tail = fh.read(tail_len)
        pos = _find_eocd(tail)
        if pos is None:
            return "no zip end-of-central-directory record at its end: truncated or not a zip"
        eocd_at = size - tail_len + pos
        _, _, _, _, entries, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, pos)
        limit = eocd_at
        locator_at = eocd_at - _LOCATOR.size
        if locator_at >= 0 and _read_at(fh, locator_at, 4) == _LOCATOR_SIG:
            _, _, eocd64_at, _ = _LOCATOR.unpack(_read_at(fh, locator_at, _LOCATOR.size))
            record = _read_at(fh, eocd64_at, _EOCD64.size)
            if eocd64_at > locator_at or len(record) < _EOCD64.size:
                return "zip64 end record lies past its locator: damaged"
            sig, *_, cd_size, cd_offset = _EOCD64.unpack(record)
            if sig != _EOCD64_SIG:
                return "zip64 end record missing where its locator points: damaged"
            limit = eocd64_at
        elif 0xFFFFFFFF in (cd_size, cd_offset) or entries == 0xFFFF:
            return "zip64 end records missing: truncated or damaged"
        if cd_offset + cd_size > limit:
            return "central directory overlaps its end records: truncated or damaged"
        if cd_size and _read_at(fh, cd_offset, 4) != _CENTRAL_SIG:
            return "no central directory where the end record says: truncated or damaged"
    return None


def _read_at(fh: BinaryIO, offset: int, length: int) -> bytes:
    fh.seek(offset)
    return fh.read(length)


def _find_eocd(tail: bytes) -> int | None:
    """Position of the end record whose comment reaches exactly to the end of the file."""
    pos = tail.rfind(_EOCD_SIG)
    while pos >= 0:
        if pos + _EOCD.size <= len(tail):
            comment_len = _EOCD.unpack_from(tail, pos)[-1]
            if pos + _EOCD.size + comment_len == len(tail):
                return pos
        pos = tail.rfind(_EOCD_SIG, 0, pos)
    return None
