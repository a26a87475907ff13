"""Is a `.safetensors` file whole? Its JSON header gives every tensor's byte range, so the
file must be exactly 8 + header + the end of the last range long: a cut-off write shows."""

from __future__ import annotations

import json
import struct
from pathlib import Path

_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit on the header


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with the safetensors file at `path`, or None if its size adds up."""
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        if size < 8:
            return f"{size} bytes, too short for a safetensors file: truncated"
        fh.seek(0)
        (header_len,) = struct.unpack("<Q", fh.read(8))
        if header_len > min(_MAX_HEADER, size - 8):
            return "safetensors header is longer than the file: truncated or damaged"
        try:
            header = json.loads(fh.read(header_len))
            end = max(
                (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
                default=0,
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "safetensors header is not valid: damaged"
    expected = 8 + header_len + end
    if size != expected:
        return f"safetensors file is {size} bytes, its header says {expected}: truncated"
    return None
