"""verl's single-turn agent loop with a request id that names the sample, test support only.

The CPU rollout seeds each request from (rollout.seed, weights' step, request id). verl's
single-turn loop makes the request id "det-<priority>" under `rollout.full_determinism`, but
the V1 trainer's agent loop (trainer/ppo/v1/agent_loop_tq.py) never sets a priority, so every
request of a step is "det-0" and the n samples of a prompt come out identical (GRPO advantages
all 0). This loop, registered as `rljob_cpu_single_turn`
(`actor_rollout_ref.rollout.agent.default_agent_loop=rljob_cpu_single_turn`), only sets the
priority from the sample's identity, the dataset row's `index` and the `session_id` (0..n-1),
then runs verl's own loop unchanged. It fakes nothing; the dataset's `index`es must be unique
within a step (they are in verl's RL format, `extra_info.index`).
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

NAME = "rljob_cpu_single_turn"


@register(NAME)
class SampleSeededSingleTurnAgentLoop(SingleTurnAgentLoop):
    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs):
        index, session_id = kwargs.get("index"), kwargs.get("session_id")
        if index is not None and session_id is not None:
            priority = (int(index) << 16) + int(session_id)
        return await super().run(sampling_params, priority=priority, **kwargs)
