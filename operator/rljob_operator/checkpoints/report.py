"""JSON that must fit a Kubernetes termination message (at most 4096 bytes).

The inspector pod writes `latest`'s answer to /dev/termination-log, which the kubelet
truncates at 4096 bytes; a truncated JSON document would not parse. So the oldest
`rejected` entries are dropped, and their number given in `rejected_truncated`, until
the document fits.
"""

from __future__ import annotations

import json
from typing import Any

TERMINATION_LOG_LIMIT = 4096


def dumps(payload: dict[str, Any]) -> str:
    """Compact JSON in plain ASCII: a name on the volume need not be UTF-8 (Python holds its
    bytes as lone surrogates, which no UTF-8 writer takes), and escaped it still round-trips."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=True)


def fit_json(payload: dict[str, Any], limit: int = TERMINATION_LOG_LIMIT) -> str:
    """`payload` as JSON of at most `limit` UTF-8 bytes, shedding the oldest rejections."""
    rejected = payload.get("rejected", [])

    def render(keep: int) -> str:
        shown = dict(payload, rejected=rejected[:keep])
        if keep < len(rejected):
            shown["rejected_truncated"] = len(rejected) - keep
        return dumps(shown)

    def fits(keep: int) -> bool:
        return len(render(keep).encode()) <= limit

    if fits(len(rejected)):
        return render(len(rejected))
    low, high = 0, len(rejected)  # fits(low) is the invariant once checked below
    if not fits(low):
        raise ValueError(f"the answer alone is longer than {limit} bytes")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return render(low)
