"""How rljob's bridges behave as guests in a user's program: hooks that patch a framework's
name right after its module runs, checked first and never raising, and the user's program
run in this process as Python would run it.

Shared by the bridges into the frameworks' loops (rljob_ray_bridge and the hooks beside it:
RLinf, verl, OpenRLHF; rljob_hf_bridge: Hugging Face's Trainer, TRL's trainers among them).
Mounted beside them in the user's pod, where they import it as a top-level module; standard
library only.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.metadata
import inspect
import os
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol


class Guest(Protocol):
    """What a bridge's state records of a hook that is not as it expects."""

    def cannot_save(self, framework: str, why: str) -> None:
        """Without it rljob cannot save on notice: turn the save on notice off, say why."""

    def saves_later(self, framework: str, why: str) -> None:
        """Without it the save on notice still works, later: say so."""


@functools.cache
def version_of(framework: str) -> str:
    """'verl 0.9.1', as the installed distribution says; the bare name where none does. Read
    once per process: a progress record that names it is written at every step."""
    try:
        return f"{framework} {importlib.metadata.version(framework)}"
    except Exception:
        return framework


@dataclass(frozen=True)
class Hook:
    """One name a bridge wraps: where it is defined, what the wrapper reads of its calls."""

    framework: str  # its distribution's name, for the record: "verl", "transformers"
    module: str  # the module that defines the name, which is patched before any import of it
    name: str  # inside the module: "check_progress", "PPOTrainer.step"
    wrap: Callable[..., Callable[..., Any]]  # (the framework's function, the guest) -> wrapper
    reads: tuple[str, ...] = ()  # the parameters the wrapper reads, by name
    # Empty: without it rljob cannot save on notice. Else what happens without it: the save
    # on notice still works, later.
    later: str = ""

    def apply(self, module: ModuleType, guest: Guest) -> None:
        """Wrap the name in `module` if it is as the hook expects; never raises."""
        try:
            *path, attribute = self.name.split(".")
            owner: Any = module
            for part in path:
                owner = getattr(owner, part)
            original = getattr(owner, attribute)
            missing = [p for p in self.reads if p not in inspect.signature(original).parameters]
            if missing:
                raise LookupError(f"has no parameter {', '.join(missing)}")
            setattr(owner, attribute, self.wrap(original, guest))
        except AttributeError:
            self.unavailable(guest, "not found")
        except Exception as exc:
            self.unavailable(guest, str(exc) or repr(exc))

    def unavailable(self, guest: Guest, why: str) -> None:
        what = f"{version_of(self.framework)}: {self.module}.{self.name} {why}"
        if self.later:
            guest.saves_later(self.framework, f"{what}: {self.later}")
        else:
            guest.cannot_save(self.framework, what)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Applies the hooks of module `name` right after it executes, before anything imports a
    name from it. Anything unexpected leaves the import to Python, unpatched."""

    def __init__(self, hooks: tuple[Hook, ...], guest: Guest) -> None:
        self.hooks, self.guest = hooks, guest

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        hooks = [hook for hook in self.hooks if hook.module == name]
        if not hooks:
            return None
        try:
            spec = None
            for finder in (f for f in sys.meta_path if f is not self):
                find = getattr(finder, "find_spec", None)
                spec = find(name, path, target) if find else None
                if spec is not None:
                    break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            run = spec.loader.exec_module
        except Exception:
            return None

        def exec_module(module: ModuleType) -> None:
            run(module)
            for hook in hooks:
                hook.apply(module, self.guest)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(hooks: tuple[Hook, ...], guest: Guest) -> None:
    """Hook the frameworks' modules in this process (once; those imported already now)."""
    if any(isinstance(f, PatchOnImport) for f in sys.meta_path):
        return
    for hook in hooks:
        if hook.module in sys.modules:
            hook.apply(sys.modules[hook.module], guest)
    sys.meta_path.insert(0, PatchOnImport(hooks, guest))


def run_program(argv: list[str]) -> int | str | None:
    """Run `[-u] (-m MODULE | SCRIPT) ARGS...` in this process, as Python would (sys.argv,
    sys.path[0], `__main__`), and give the code it exited with (SystemExit's, or 0)."""
    rest = list(argv)
    while rest[:1] == ["-u"]:
        rest = rest[1:]
    if not rest or (rest[0].startswith("-") and (rest[0] != "-m" or len(rest) < 2)):
        raise SystemExit(f"rljob: cannot run {argv!r}: only [-u] -m MODULE or SCRIPT")
    try:  # sys.path[0] is the bridge's folder: make it what Python would have made it
        if rest[0] == "-m":
            sys.argv = [rest[1], *rest[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(rest)
            sys.path[0] = str(Path(rest[0]).resolve().parent)
            runpy.run_path(rest[0], run_name="__main__")
    except SystemExit as exc:
        return exc.code
    return 0
