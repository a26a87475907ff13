"""What a layout is: the name `--layout` takes and the one check that judges a folder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rljob_contract.steps import STEP_DIR_PREFIX

from ..verdict import Corrupt, Incomplete, Status, Verdict

# check(folder, step, deep) raises Incomplete or Corrupt, or returns what it verified.
Check = Callable[[Path, int, bool], str]


@dataclass(frozen=True)
class Layout:
    name: str  # as given to --layout
    check: Check
    # Parts that some runs write in every save and other runs never (RLinf's data/data.pt,
    # a critic/): a folder may lack one, unless its older complete peers all have it.
    optional_parts: tuple[str, ...] = ()
    # The step folders' names: `<prefix>N`.
    folder_prefix: str = STEP_DIR_PREFIX

    def judge(self, folder: Path, step: int, deep: bool) -> Verdict:
        """The verdict on `folder`; unreadable files make it incomplete, never a crash."""
        try:
            summary = self.check(folder, step, deep)
        except Incomplete as exc:
            return Verdict(Status.INCOMPLETE, str(exc), self.name)
        except Corrupt as exc:
            return Verdict(Status.CORRUPT, str(exc), self.name)
        except OSError as exc:
            return Verdict(Status.INCOMPLETE, _unreadable(folder, exc), self.name)
        return Verdict(Status.COMPLETE, summary, self.name)


def _unreadable(folder: Path, exc: OSError) -> str:
    name = str(exc.filename or folder).rstrip("/")
    prefix = str(folder) + "/"
    shown = folder.name if name == str(folder) else name.removeprefix(prefix)
    return f"cannot read {shown}: {exc.strerror or exc}"


# RLinf and verl both save the policy to actor/ and, when the algorithm has one, the value
# model to critic/ beside it (verl: str(Role.Critic) == "critic").
ROLES = ("actor", "critic")
# check_role(folder, role, step, deep): like Check, for one role folder of the checkpoint.
RoleCheck = Callable[[Path, str, int, bool], str]
