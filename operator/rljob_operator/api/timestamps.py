"""The timestamps of the job's status and Events: RFC 3339 in UTC, as Kubernetes writes them."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_precise(moment: datetime) -> str:
    """Microseconds, for the recovery timeline that latency figures are computed from."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(value: str) -> datetime:
    """A timestamp as Kubernetes or this operator wrote it; one without a zone is UTC."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
