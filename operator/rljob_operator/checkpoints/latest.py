"""Judge step folders (`global_step_N`, or a layout's own `<prefix>N`), newest first, and
choose the newest complete one.

The Python API the operator calls in-process when it can read the volume itself; the
`rljob ckpt` CLI is a thin shell over it. Only the folders that have to be judged are
opened: `find_latest` stops at the first complete folder from the top.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rljob_contract.steps import STEP_DIR_PREFIX

from .candidates import Candidate, candidate_for_folder, confine, scan
from .detect import directory_layout, folder_layout, writer_layout
from .errors import CheckpointInputError
from .layouts import AUTO, LAYOUTS, Layout, get_layout
from .parts import PEERS, missing_part, torn_reason
from .verdict import Status, Verdict

VERIFY_MODES = ("quick", "deep")
NO_LAYOUT = "no recognisable checkpoint layout"


@dataclass(frozen=True)
class Judged:
    step: int
    path: Path  # absolute, no trailing slash
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        """One entry of `list --json`; `rejected` entries drop the layout."""
        return {
            "step": self.step,
            "path": str(self.path),
            "verdict": self.verdict.status.value,
            "reason": self.verdict.reason,
            "layout": self.verdict.layout,
        }


@dataclass(frozen=True)
class LatestResult:
    verify: str
    chosen: Judged | None  # the newest complete folder, None if there is none
    rejected: tuple[Judged, ...]  # every folder newer than `chosen` (all, if none), newest first

    @property
    def found(self) -> bool:
        return self.chosen is not None

    @property
    def step(self) -> int | None:
        return self.chosen.step if self.chosen else None

    @property
    def path(self) -> str | None:
        """Absolute, without a trailing slash: ready for resume_overrides()."""
        return str(self.chosen.path) if self.chosen else None

    @property
    def layout(self) -> str | None:
        return self.chosen.verdict.layout if self.chosen else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON the operator parses (docs/checkpoints.md, "JSON output")."""
        return {
            "found": self.found,
            "step": self.step,
            "path": self.path,
            "layout": self.layout,
            "verify": self.verify,
            "rejected": [
                {k: v for k, v in j.to_dict().items() if k != "layout"} for j in self.rejected
            ],
        }


def find_latest(
    directory: str | os.PathLike[str],
    layout: str = AUTO,
    verify: str = "quick",
    *,
    exclude: Iterable[str | os.PathLike[str]] = (),
    within: str | os.PathLike[str] | None = None,
) -> LatestResult:
    """The newest complete checkpoint in `directory` and why every newer one was rejected.

    `exclude` names folders the caller will not resume from whatever their files say
    (say, one a trainer already failed to load); they are rejected as "excluded".
    `within`: refuse a `directory` that resolves outside it (the job's volume).
    """
    fixed, deep = _options(layout, verify)
    if within is not None:
        confine(directory, within)
    candidates = scan(directory, _prefix(fixed))
    skip = {_normalise(p) for p in exclude}
    rejected = []
    for judged in _judge_each(candidates, lambda: candidates, fixed, deep, skip):
        if judged.verdict.ok:
            return LatestResult(verify, judged, tuple(rejected))
        rejected.append(judged)
    return LatestResult(verify, None, tuple(rejected))


def list_checkpoints(
    directory: str | os.PathLike[str], layout: str = AUTO, verify: str = "quick"
) -> tuple[Judged, ...]:
    """Every `global_step_N` entry in `directory` with its verdict, newest first."""
    fixed, deep = _options(layout, verify)
    candidates = scan(directory, _prefix(fixed))
    return tuple(_judge_each(candidates, lambda: candidates, fixed, deep))


def verify_folder(
    folder: str | os.PathLike[str],
    layout: str = AUTO,
    verify: str = "quick",
    *,
    within: str | os.PathLike[str] | None = None,
) -> Judged:
    """The verdict on one `global_step_N` folder, judged as `list` would judge it.

    `within`: refuse a `folder` that resolves outside it (the job's volume).
    """
    fixed, deep = _options(layout, verify)
    if within is not None:
        confine(folder, within)
    candidate = candidate_for_folder(folder, _prefix(fixed))
    return next(_judge_each([candidate], lambda: _siblings(candidate, fixed), fixed, deep))


def _options(layout: str, verify: str) -> tuple[Layout | None, bool]:
    """The fixed layout (None for auto) and whether to verify deeply; bad input raises."""
    if verify not in VERIFY_MODES:
        raise CheckpointInputError(f"unknown verify mode {verify!r}: choose quick or deep")
    return (None if layout == AUTO else get_layout(layout)), verify == "deep"


def _normalise(path: str | os.PathLike[str]) -> Path:
    """An absolute path with its directory resolved, as candidates' paths are."""
    absolute = Path(os.path.abspath(path))
    return absolute.parent.resolve() / absolute.name


def _prefix(fixed: Layout | None) -> str:
    """The step folders' prefix: the layout's, or `global_step_` for auto."""
    return fixed.folder_prefix if fixed else STEP_DIR_PREFIX


def _siblings(candidate: Candidate, fixed: Layout | None) -> Sequence[Candidate]:
    """The folders beside `candidate`, which `auto` reads when the candidate shows no layout,
    and a layout with optional parts to compare it with its peers."""
    try:
        return scan(candidate.root, _prefix(fixed))
    except CheckpointInputError:
        return [candidate]


def _judge_each(
    candidates: Sequence[Candidate],
    siblings: Callable[[], Sequence[Candidate]],
    fixed: Layout | None,
    deep: bool,
    skip: Collection[Path] = (),
) -> Iterator[Judged]:
    """Verdicts in the order of `candidates`; `siblings` is only listed if `auto` needs it."""

    @functools.cache
    def directory_default() -> str | None:
        folders = siblings()
        return directory_layout(folders[0].root, folders) if folders else None

    written_by = functools.cache(writer_layout)  # one look per directory, not per folder

    def layout_of(candidate: Candidate) -> Layout | None:
        name = fixed.name if fixed else detected(candidate)
        return LAYOUTS[name] if name else None

    def detected(candidate: Candidate) -> str | None:
        """auto: the directory's writer, else the folder's own files, else its siblings'."""
        return written_by(candidate.root) or folder_layout(candidate.path) or directory_default()

    @functools.cache
    def complete_by_layout(index: int, layout: Layout) -> bool:
        """Whether sibling `index` is complete in `layout` alone (a quick look at a peer)."""
        peer = siblings()[index]
        return peer.problem is None and layout.judge(peer.path, peer.step, False).ok

    def peers(candidate: Candidate, layout: Layout) -> list[Path]:
        """The nearest older folders of the run that are complete in the same layout."""
        found: list[Path] = []
        for index, peer in enumerate(siblings()):
            if len(found) == PEERS:
                break
            if peer.step < candidate.step and complete_by_layout(index, layout):
                found.append(peer.path)
        return found

    for candidate in candidates:
        path = candidate.path
        layout = None
        if path in skip:
            verdict = Verdict(Status.EXCLUDED, "excluded by the caller")
        elif candidate.problem is not None:
            verdict = Verdict(Status.INCOMPLETE, candidate.problem)
        elif (layout := layout_of(candidate)) is None:
            verdict = Verdict(Status.INCOMPLETE, NO_LAYOUT)
        else:
            verdict = layout.judge(path, candidate.step, deep)
        if verdict.ok and layout is not None and layout.optional_parts:
            older = peers(candidate, layout)
            part = missing_part(path, layout.optional_parts, older)
            if part is not None:
                verdict = Verdict(Status.INCOMPLETE, torn_reason(part, older), layout.name)
        yield Judged(candidate.step, path, verdict)
