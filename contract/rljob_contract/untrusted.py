"""JSON from a checkpoint volume is untrusted input: parse it without letting it crash us."""

from __future__ import annotations

import json
import math
from typing import Any


class UntrustedJSONError(ValueError):
    """The text is not JSON we will read: malformed, or nested too deeply to parse."""


def loads(text: str) -> Any:
    """json.loads, with every way hostile text can fail as UntrustedJSONError.

    Python's parser recurses once per nesting level, so "[" * 100000 raises RecursionError
    rather than a decode error.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UntrustedJSONError(exc.msg) from exc
    except RecursionError:
        raise UntrustedJSONError("nested too deeply") from None


def positive_number(value: object) -> float | None:
    """`value` as a float where it is a finite number above 0 (not a bool), else None."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if number and math.isfinite(value) and value > 0 else None  # type: ignore[arg-type]
