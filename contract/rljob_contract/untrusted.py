"""JSON from a checkpoint volume is untrusted input: parse it without letting it crash us."""

from __future__ import annotations

import json
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
