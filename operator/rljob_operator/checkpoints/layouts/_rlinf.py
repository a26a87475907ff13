"""What RLinf's runners write around the model's own files, for both backends.

The runner saves `actor/`, then `critic/` when there is one, then (the reasoning runner
only) `data/data.pt` with a plain torch.save. The embodied and SFT runners write no
`data/`, so a missing `data/` proves nothing; a `data/` without a whole `data.pt` is a
save cut short at its very end.
"""

from __future__ import annotations

from pathlib import Path

from ..probe import intact_zip, is_dir, nonempty_file, require_dir
from .base import ROLES, RoleCheck

DATA = "data/data.pt"
OPTIONAL_PARTS = ("critic", DATA)


def check_run(folder: Path, step: int, deep: bool, check_role: RoleCheck) -> str:
    """Check every role folder with `check_role`, then the dataloader state if any."""
    require_dir(folder, "actor")
    done = [check_role(folder, role, step, deep) for role in ROLES if is_dir(folder, role)]
    if is_dir(folder, "data"):
        nonempty_file(folder, DATA, "the reasoning runner writes it last")
        if deep:
            intact_zip(folder, DATA)
        done.append(DATA)
    return "; ".join(done)
