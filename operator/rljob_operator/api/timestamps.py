"""The timestamps of the job's status and Events: RFC 3339 in UTC, as Kubernetes writes them.

The one time helper of the project: the test tooling, the demo and the benchmarks use it too.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime | None = None) -> str:
    """Seconds, as Kubernetes' Time; now if no moment is given."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_precise(moment: datetime | None = None) -> str:
    """Microseconds, as Kubernetes' MicroTime, and for the recovery timeline that latency
    figures are computed from; now if no moment is given."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(value: str) -> datetime:
    """A timestamp as Kubernetes or this operator wrote it; one without a zone is UTC."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def unix_seconds(value: str | None) -> float | None:
    """A timestamp as seconds since the epoch (None for none), for figures and timelines."""
    return parse_iso(value).timestamp() if value else None
