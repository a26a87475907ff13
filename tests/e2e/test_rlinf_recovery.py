"""A job in RLinf's layout resumes through RLinf's own switch, `runner.resume_dir=<dir>`.

fake_rlinf.py stands in for RLinf's entry point (its command line and its FSDP checkpoint
layout, no training); the job is evicted at a random step and must come back from the
newest complete `global_step_N` that the operator found with `layout: rlinf-fsdp`.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from e2e_steps import (
    CLAIM,
    MOUNT,
    POOL_LABEL,
    REPORTS,
    assert_nothing_left,
    attempts_of,
    create_job,
    evict,
    free_port,
    running_gang,
    wait_for,
    wait_succeeded,
)
from fake_rlinf import expected_state, initial_state
from rljob_operator import constants as c

FAKE = Path(__file__).with_name("fake_rlinf.py")
JOB = "rlinf"
MAX_STEPS = 16
INTERVAL = 4
STEP = re.compile(r"fake_rlinf: step (\d+)/")
SAVED = re.compile(r"fake_rlinf: saved \S*/global_step_(\d+)")


def rlinf_job(port: int, pool: str) -> dict:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": JOB},
        "spec": {
            "framework": "rlinf",
            "image": "rlinf/rlinf:example",
            "command": ["python", str(FAKE)],
            "args": [
                f"runner.output_dir={MOUNT}/{JOB}", "runner.experiment_name=run",
                f"runner.max_steps={MAX_STEPS}", f"runner.save_interval={INTERVAL}",
                "runner.seconds_per_step=0.3",
            ],
            "nnodes": 1,
            "nprocPerNode": 1,
            "rendezvousPort": port,
            "resources": {"limits": {"nvidia.com/gpu": 1}},
            "checkpoint": {
                "volume": {"persistentVolumeClaim": {"claimName": CLAIM}},
                "directory": f"{JOB}/run/checkpoints",
                "layout": "rlinf-fsdp",
            },
            "restartPolicy": {"maxFailures": 0},
            "template": {"spec": {"nodeSelector": {POOL_LABEL: pool},
                                  "terminationGracePeriodSeconds": 30}},
        },
    }  # fmt: skip


def last(pattern: re.Pattern, text: str) -> int:
    return max((int(m) for m in pattern.findall(text)), default=0)


def test_rlinf_job_resumes_from_its_newest_complete_checkpoint_through_resume_dir(
    api_client, core, namespace, rng, agents, claim, e2e_operator
):
    pool = agents(1, gpus=1)
    port = free_port()
    checkpoints = claim / JOB / "run" / "checkpoints"
    at = rng.randint(INTERVAL + 1, MAX_STEPS - 5)
    create_job(api_client, namespace, rlinf_job(port, namespace))

    gang = running_gang(core, namespace, 0, 1)
    first = wait_for(lambda: next(iter(pool.records()), None), what="the first pod to start")
    wait_for(lambda: last(STEP, first.log()) >= at, 120, f"step {at}")
    evict(core, namespace, gang[0].metadata.name)

    job = wait_succeeded(api_client, namespace, JOB)
    attempts = attempts_of(pool.records(), JOB)
    before, after = attempts[0][0], attempts[1][0]
    newest = last(SAVED, before.log())
    folder = f"{checkpoints}/global_step_{newest}"
    (recovery,) = job["status"]["recoveries"]
    assert (recovery["kind"], recovery["reason"]) == ("Disruption", "EvictionByEvictionAPI")
    assert recovery["resumedFromStep"] == newest
    assert "lastFinishedStep" not in recovery  # RLinf writes no progress file
    assert after.argv[-1] == f"runner.resume_dir={folder}"  # the framework's own switch
    assert f"fake_rlinf: resumed from {folder} at step {newest}" in after.log()

    state = initial_state()
    with warnings.catch_warnings():  # "no process group: loading in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(
            {"model": state}, checkpoint_id=str(checkpoints / f"global_step_{MAX_STEPS}" / "actor")
        )
    want = expected_state(MAX_STEPS)
    assert all(torch.equal(state[k], want[k]) for k in want)
    report = (
        f"RLinf layout (stand-in), 1 node x 1 process, evicted after step {last(STEP, before.log())}:"
        f" resumed with runner.resume_dir=.../global_step_{newest}; final state equal to an "
        "uninterrupted run"
    )
    REPORTS.append(report)
    print(report)
    assert_nothing_left(pool, port, api_client, core, namespace, JOB)
