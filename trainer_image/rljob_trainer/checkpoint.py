"""Checkpoints: `<checkpoint_dir>/global_step_N/`, sealed by the rljob manifest, written last.

The manager here is the same for both backends: one save in flight at most, the folder of a
step replaced and never mixed, the manifest written by rank 0 once every rank's part is on
disk, retention, and the choice of the folder to resume from. What a backend writes into the
folder, and how it reads it back, is its `CheckpointFormat`:
`rljob_trainer.fsdp.checkpoint.DcpFormat` for FSDP2 and
`rljob_trainer.megatron.checkpoint.MegatronFormat` for megatron-core. Both keep the sampler in
`data/data.pt` and their shards under `actor/`.

A folder without a readable manifest is never loaded.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import torch.distributed as dist
from rljob_contract.manifest import (
    Corrupt,
    Incomplete,
    Manifest,
    check_complete,
    read_manifest,
    write_manifest,
)
from rljob_contract.steps import parse_step, step_dir_name

from rljob_trainer.faults import NO_FAULTS, Faults

log = logging.getLogger(__name__)

ACTOR_DIR = "actor"
DATA_FILE = "data/data.pt"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used, with the reason and the folder in the message."""


class CheckpointFormat(Protocol):
    """What one backend writes into a `global_step_N` folder, and how it reads it back."""

    def sealed_files(self, step: int) -> tuple[str, ...]:
        """Files the manifest of a checkpoint in this format must list."""
        ...

    def write(self, folder: Path, step: int, background: ThreadPoolExecutor | None) -> list[Future]:
        """Write this rank's part (collective); with `background`, return what still runs."""
        ...

    def read(
        self, folder: Path, manifest: Manifest, allow_world_size_change: bool, collective: bool
    ) -> None:
        """Restore every state from a complete folder (collective, or each rank alone)."""
        ...


SealedFiles = Callable[[int], tuple[str, ...]]


def incomplete_reason(folder: Path, sealed_files: SealedFiles) -> str | None:
    """Why `folder` is not a complete trainer checkpoint, or None if it is one.

    The contract's definition of complete (sizes, not checksums: the operator's verifier
    checks those), with the backend's own files among those it seals.
    """
    try:
        manifest = check_complete(folder, parse_step(folder.name))
    except (Incomplete, Corrupt) as exc:
        return str(exc)
    listed = {entry.path for entry in manifest.files}
    for rel in sealed_files(manifest.step):
        if rel not in listed:
            return f"its manifest lists no {rel}, so it is not a checkpoint of this backend"
    return None


def list_checkpoints(checkpoint_dir: Path, sealed_files: SealedFiles) -> list[tuple[str, bool]]:
    """(name, complete) of every `global_step_N` folder; other names are not listed."""
    if not checkpoint_dir.is_dir():
        return []
    return [
        (p.name, incomplete_reason(p, sealed_files) is None)
        for p in checkpoint_dir.iterdir()
        if p.is_dir() and parse_step(p.name) is not None
    ]


def newest_complete(checkpoint_dir: Path, sealed_files: SealedFiles) -> Path | None:
    complete = [name for name, ok in list_checkpoints(checkpoint_dir, sealed_files) if ok]
    if not complete:
        return None
    return checkpoint_dir / max(complete, key=lambda name: parse_step(name) or 0)


def choose_checkpoints_to_delete(entries: Iterable[tuple[str, bool]], keep: int) -> list[str]:
    """The folders retention removes: complete `global_step_N` beyond the `keep` newest.

    `entries` are (folder name, complete). keep == 0 keeps everything. Incomplete folders (one
    being written, or torn by a crash: never loaded, overwritten when that step is saved again)
    and names that are not `global_step_N` are never chosen, nor is the newest complete one.
    """
    if keep <= 0:
        return []
    complete = sorted(
        ((parse_step(name), name) for name, ok in entries if ok and parse_step(name) is not None),
        reverse=True,
    )
    return [name for _, name in sorted(complete[keep:])]


def check_step(folder: Path, manifest: Manifest, loaded_step: int) -> None:
    if loaded_step != manifest.step:
        raise CheckpointError(
            f"{folder}: its manifest says step {manifest.step}, its train state step {loaded_step}"
        )


def warn_reseeded(why: str, step: int) -> None:
    log.warning(
        "%s: reseeded per-rank random state at step %d; this run is not bit-exact with an "
        "uninterrupted one",
        why,
        step,
    )


class CheckpointManager:
    """Saves, seals, purges and loads checkpoints; every rank holds one, rank 0 writes the rest.

    `fmt` writes and reads a folder's contents for the backend; the manager owns the folders.
    """

    def __init__(
        self,
        checkpoint_dir: Path,
        fmt: CheckpointFormat,
        *,
        async_save: bool,
        keep: int,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.fmt = fmt
        self.async_save = async_save
        self.keep = keep
        self.faults = faults
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rljob-ckpt")
        self._inflight: list[Future] = []
        self._unsealed: tuple[int, Path] | None = None
        self.saved_step: int | None = None
        """The step of the newest checkpoint this run saved (or is saving), or resumed from;
        the same on every rank."""
        self._save_started = 0.0
        self._save_seconds: list[float] = []

    @property
    def save_seconds(self) -> float | None:
        """The mean time of this attempt's saves, from their start until sealed (async: until
        the step boundary that sealed it, which counts the training that overlapped it)."""
        return sum(self._save_seconds) / len(self._save_seconds) if self._save_seconds else None

    # ----------------------------------------------------------------------------- resume
    def resolve_resume_dir(self, resume_dir: str | None, auto_resume: bool) -> Path | None:
        """The explicit resume_dir, else (auto_resume) the newest complete checkpoint; rank 0
        decides and every rank gets its answer, so all ranks load the same folder."""
        choice: list[str | None] = [None]
        if self.rank == 0:
            if resume_dir:
                choice[0] = str(Path(resume_dir))
            elif auto_resume:
                newest = newest_complete(self.checkpoint_dir, self.fmt.sealed_files)
                choice[0] = str(newest) if newest else None
        dist.broadcast_object_list(choice, src=0)
        return Path(choice[0]) if choice[0] else None

    def load(
        self,
        folder: Path,
        allow_world_size_change: bool,
        kept: int | None = None,
        collective: bool = True,
    ) -> int:
        """Restore every state from a complete checkpoint; return its step. A rank that `kept`
        that step in memory reads nothing; with `collective` False each rank reads alone (some
        ranks of a warm restart read nothing)."""
        reasons = [incomplete_reason(folder, self.fmt.sealed_files) if self.rank == 0 else None]
        dist.broadcast_object_list(reasons, src=0)
        if reasons[0] is not None:
            raise CheckpointError(f"refusing to resume from {folder}: {reasons[0]}")
        manifest = read_manifest(folder)
        if kept != manifest.step:
            self.fmt.read(folder, manifest, allow_world_size_change, collective)
        self.saved_step = manifest.step
        return manifest.step

    # ------------------------------------------------------------------------------- save
    def folder(self, step: int) -> Path:
        return self.checkpoint_dir / step_dir_name(step)

    def save(self, step: int) -> float:
        """Checkpoint the current state as step `step`; return the seconds training stalled."""
        start = time.perf_counter()
        self.wait()
        self._save_started = time.perf_counter()
        folder = self.folder(step)
        if self.rank == 0:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            if folder.exists():
                # A torn folder of a crashed attempt, or a newer timeline after resuming from an
                # older checkpoint: either way it is replaced, never mixed with new files.
                log.warning("removing existing %s before saving step %d", folder, step)
                shutil.rmtree(folder)
        dist.barrier()
        self._inflight += self.fmt.write(folder, step, self._executor if self.async_save else None)
        self._unsealed = (step, folder)
        self.saved_step = step
        if not self.async_save:
            dist.barrier()
            self._seal()
        return time.perf_counter() - start

    def local_done(self) -> bool:
        """Whether this rank has nothing of a save still running."""
        return all(f.done() for f in self._inflight)

    @property
    def unsealed(self) -> bool:
        return self._unsealed is not None

    def seal_agreed(self) -> None:
        """Every rank reported local_done(): seal the pending save (rank 0, in the background)."""
        self._collect()
        self._seal(background=True)

    def wait(self) -> None:
        """Block until no save is in flight on any rank and the last one is sealed (collective
        only if a save is unsealed, which every rank knows alike)."""
        self._collect()
        if self._unsealed is not None:
            dist.barrier()
            self._seal()
        self._collect()

    def finish(self) -> None:
        """At exit: everything written and sealed before any rank leaves (torchrun tears the
        whole group down as soon as one rank exits with an error code)."""
        self.wait()
        dist.barrier()
        self._executor.shutdown()

    def _collect(self) -> None:
        futures, self._inflight = self._inflight, []
        for future in futures:
            future.result()  # re-raises a failed write here, on the training thread

    def _seal(self, background: bool = False) -> None:
        assert self._unsealed is not None
        step, folder = self._unsealed
        self._unsealed = None
        self._save_seconds.append(time.perf_counter() - self._save_started)
        if self.rank != 0:
            return
        if background:
            self._inflight.append(
                self._executor.submit(self._write_manifest_and_purge, step, folder)
            )
        else:
            self._write_manifest_and_purge(step, folder)

    def _write_manifest_and_purge(self, step: int, folder: Path) -> None:
        self.faults.before_manifest(step)
        write_manifest(folder, step, self.world_size)
        log.info("saved checkpoint %s", folder)
        listed = list_checkpoints(self.checkpoint_dir, self.fmt.sealed_files)
        for name in choose_checkpoints_to_delete(listed, self.keep):
            log.info("retention: removing %s", self.checkpoint_dir / name)
            shutil.rmtree(self.checkpoint_dir / name, ignore_errors=True)
