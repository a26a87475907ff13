"""Test-only faults, read once at start-up into one frozen record that the loop is handed.

The product modules carry no test switch and no sleep: they call the record's methods, which
do nothing unless a test set the variable. Every variable is named `RLJOB_TRAINER_TEST_*`.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

# Rank 0 SIGKILLs itself after the shards of this step are written and before the manifest,
# leaving exactly the torn folder a preemption would leave.
ENV_TEST_KILL_BEFORE_MANIFEST = "RLJOB_TRAINER_TEST_KILL_BEFORE_MANIFEST"
# Rank 0 sleeps this many seconds before sealing a save made on a stop request, to stand for a
# large model whose save outlasts torchrun's default 30 s shutdown timeout.
ENV_TEST_SLOW_STOP_SAVE = "RLJOB_TRAINER_TEST_SLOW_STOP_SAVE_SECONDS"
# Every rank sleeps this many seconds before each sampled token, to stand for the minutes-long
# rollout of a real RL step: from the step named by the second variable on (default 1), so that
# a test reaches the step it gives notice in at full speed.
ENV_TEST_SLOW_ROLLOUT_TOKEN = "RLJOB_TRAINER_TEST_SLOW_ROLLOUT_TOKEN_SECONDS"
ENV_TEST_SLOW_ROLLOUT_FROM_STEP = "RLJOB_TRAINER_TEST_SLOW_ROLLOUT_FROM_STEP"


def _seconds(env: Mapping[str, str], name: str) -> float:
    return float(env.get(name) or 0)


@dataclass(frozen=True)
class Faults:
    kill_before_manifest: int | None = None
    slow_stop_save: float = 0.0
    slow_rollout_token: float = 0.0
    slow_rollout_from_step: int = 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        env = os.environ if env is None else env
        kill = env.get(ENV_TEST_KILL_BEFORE_MANIFEST)
        return cls(
            kill_before_manifest=int(kill) if kill else None,
            slow_stop_save=_seconds(env, ENV_TEST_SLOW_STOP_SAVE),
            slow_rollout_token=_seconds(env, ENV_TEST_SLOW_ROLLOUT_TOKEN),
            slow_rollout_from_step=int(env.get(ENV_TEST_SLOW_ROLLOUT_FROM_STEP) or 1),
        )

    def before_manifest(self, step: int) -> None:
        if self.kill_before_manifest == step:
            log.warning(
                "test hook %s: killing rank 0 before the manifest", ENV_TEST_KILL_BEFORE_MANIFEST
            )
            os.kill(os.getpid(), signal.SIGKILL)

    def before_stop_seal(self, rank: int) -> None:
        if self.slow_stop_save and rank == 0:
            log.warning(
                "test hook %s: the save on stop takes %.0f s more",
                ENV_TEST_SLOW_STOP_SAVE,
                self.slow_stop_save,
            )
            time.sleep(self.slow_stop_save)

    def before_token(self, step: int) -> None:
        """`step`: the step whose rollout samples the token."""
        if self.slow_rollout_token and step >= self.slow_rollout_from_step:
            time.sleep(self.slow_rollout_token)


NO_FAULTS = Faults()
