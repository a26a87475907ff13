"""A dense toy reward for the CPU runs, test support only: the tiny random model never answers
the addition prompts, so verl's rule reward (gsm8k) scores every sample 0, GRPO's advantages
are all 0 and the actor's weights never change. This score is the share of digits in the
response text, which differs between the samples of a group, so each step really updates the
weights. Selected with `reward.custom_reward_function.path=pkg://rljob_verl_cpu.reward`
(`name=compute_score`, verl's default).
"""

from __future__ import annotations


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    return sum(ch.isdigit() for ch in solution_str) / max(1, len(solution_str))
