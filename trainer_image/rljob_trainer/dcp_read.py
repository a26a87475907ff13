"""Reading tensors out of a DCP folder on one process, without a process group: what the
converter and the tests that compare checkpoints share, whatever the backend that wrote it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path


class ConvertError(RuntimeError):
    """The input is not a complete trainer checkpoint."""


def read_dcp_tensors(source: Path, wanted: Callable[[str], bool], extra: dict[str, object]):
    """The full tensors under the keys `wanted` accepts, and `extra`'s keys, from a DCP folder."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(str(source))
    metadata = reader.read_metadata().state_dict_metadata
    state: dict[str, object] = {
        key: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.items()
        if wanted(key) and isinstance(meta, TensorStorageMetadata)
    }
    missing = sorted(set(extra) - set(metadata))
    if missing:
        raise ConvertError(f"{source} holds no {', '.join(missing)}: not written by rljob_trainer")
    state.update(extra)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, storage_reader=reader, no_dist=True)
    return state
