"""kopf's peering rule as the work queue applies it: act unless a live peer outranks or ties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rljob_operator.runtime.peering import acts

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def peer(priority: int, seen_ago: float, lifetime: int = 60) -> dict:
    stamp = (NOW - timedelta(seconds=seen_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": stamp}


@pytest.mark.parametrize(
    ("peers", "expected"),
    [
        ({}, True),  # alone
        ({"me": peer(5, 0)}, True),  # only our own keep-alive
        ({"me": peer(5, 0), "b": peer(4, 1)}, True),  # outranking a live peer
        ({"me": peer(5, 0), "b": peer(6, 1)}, False),  # outranked by a live peer
        ({"me": peer(5, 0), "b": peer(5, 1)}, False),  # a tie pauses both, as in kopf
        ({"me": peer(5, 0), "b": peer(6, 61)}, True),  # the outranking peer's keep-alive ran out
        ({"me": peer(5, 0), "b": peer(6, 20, lifetime=10)}, True),
        ({"me": peer(5, 0), "b": "garbage"}, True),
        ({"me": peer(5, 0), "b": {**peer(9, 1), "priority": "high"}}, True),
    ],
)
def test_acts_applies_kopfs_rule(peers, expected):
    assert acts(peers, "me", 5, NOW) is expected


def test_a_timestamp_without_a_zone_is_utc_as_kopf_writes_it():
    naive = (NOW - timedelta(seconds=5)).replace(tzinfo=None).isoformat()
    assert acts({"b": {"priority": 9, "lifetime": 60, "lastseen": naive}}, "me", 5, NOW) is False
