"""Which watch events of a job call for a reconcile pass (the kopf handler itself is thin)."""

from __future__ import annotations

import pytest
from rljob_operator.handlers import needs_pass


def job(generation, observed=None):
    status = {} if observed is None else {"observedGeneration": observed}
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize(
    ("event_type", "body", "wanted"),
    [
        (None, job(3, 3), True),  # the initial listing at start-up
        ("ADDED", job(1), True),
        ("MODIFIED", job(2, 1), True),  # a spec change (suspend, restartPolicy, ...)
        ("MODIFIED", job(1), True),  # a status not written yet
        ("MODIFIED", job(2, 2), False),  # the operator's own status write
        ("DELETED", job(2, 1), False),
    ],
)
def test_only_new_jobs_and_spec_changes_call_for_a_pass(event_type, body, wanted):
    assert needs_pass(event_type, body) is wanted
