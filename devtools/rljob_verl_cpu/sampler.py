"""verl's own replay buffer with the batch in the order the prompts were sampled, test support.

verl's V1 trainer trains on the trajectories of a step in the order its TransferQueue lists
them, which is the order the rollouts finished (`ReplayBuffer._materialize_batch`). Rollouts
run concurrently, so two runs of the same job can sum one step's gradients in another order
and differ in the last bits from the first step on (two uninterrupted runs on CPU did:
grad norm 0.6314864 / 0.6315291). This subclass, plugged in through verl's own switch
(`trainer.v1.sampler.custom_sampler.path=pkg://rljob_verl_cpu.sampler`,
`...custom_sampler.name=SampledOrderReplayBuffer`), orders a batch's trajectories by the
position of their prompt in the step's sample from the data loader, then session and index:
the same trajectories, in an order that does not depend on timing. It fakes nothing; it is
what makes a resumed run comparable bit for bit with an uninterrupted one.
"""

from __future__ import annotations

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer


class SampledOrderReplayBuffer(ReplayBuffer):
    def _materialize_batch(self, partition_id, selected_prompt_uids, partition_snapshot):
        # Prompt keys are listed in the order the trainer put them (one batch put per step,
        # in the data loader's order); trajectory keys are "{uid}_{session}_{index}".
        position = {uid: i for i, uid in enumerate(self.prompt_global_steps[partition_id])}

        def order(key: str) -> tuple[int, int, int]:
            uid, session, index = key.split("_")
            return position.get(uid, len(position)), int(session), int(index)

        ordered = dict(sorted(partition_snapshot.items(), key=lambda item: order(item[0])))
        return super()._materialize_batch(partition_id, selected_prompt_uids, ordered)
