"""One runtime patch for verl 0.9.1 next to a newer TRL, test support only.

verl uses TRL for one class only, `AutoModelForCausalLMWithValueHead`: the FSDP engine's
`apply_monkey_patch` (verl/models/transformers/monkey_patch.py:352-356) and the critic's
value-head loader (verl/utils/model.py:654-659) import it whenever `trl` is installed at all
(`verl.utils.import_utils.is_trl_available`). TRL 1.x removed that class, so with TRL 1.16 in
the same environment (the repository's venv holds it for the TRL recipe) every actor's
`init_model` fails with "cannot import name 'AutoModelForCausalLMWithValueHead'". The patch
makes `is_trl_available` answer whether that class can be imported, which is what verl means
by it. It fakes nothing else, and must run before verl imports those modules (the plugin
switch imports this package at the end of `import verl`, before any engine).
"""

from __future__ import annotations

import importlib

import verl.utils.import_utils as verl_import_utils

_is_trl_available = verl_import_utils.is_trl_available


def _trl_value_head_available() -> bool:
    if not _is_trl_available():
        return False
    for module in ("trl.experimental.ppo", "trl"):
        try:
            if hasattr(importlib.import_module(module), "AutoModelForCausalLMWithValueHead"):
                return True
        except ImportError:
            continue
    return False


verl_import_utils.is_trl_available = _trl_value_head_available
