"""The training loop both backends share: resume, steps, checkpoints, stopping on request.

A backend (`rljob_trainer.backends` names them) builds the model, optimizer and checkpoint
format and runs one GRPO step; this loop decides
when to save, writes the metrics and progress.json, and at the end seals the last checkpoint
and tells the operator why it stopped. At each step boundary the ranks agree whether to stop
and whether an async save has finished everywhere, then maybe checkpoint.

On a notice (SIGTERM or the checkpoint request) the ranks also check, at every token of the
rollout (agreed one token later, `stop.PendingMax`, so that the check costs no wait), whether
the step can still end and be saved before the deadline
(`rljob_trainer.deadline`). If not, they abandon the rollout, rewind the sampler and every
random generator to the step's start, which is exactly the state at the end of the last
finished step (a rollout changes nothing else), and save that through the ordinary save.
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import rljob_contract as contract
import torch
import torch.distributed as dist
from rljob_contract import progress

from rljob_trainer import grpo, warm
from rljob_trainer.checkpoint import CheckpointError, CheckpointManager
from rljob_trainer.config import TrainerConfig
from rljob_trainer.data import PromptSampler
from rljob_trainer.deadline import (
    Decision,
    Phase,
    Situation,
    decide,
    describe,
    notice_budget,
    notice_deadline,
)
from rljob_trainer.deadline import rest_of_step as estimate_rest_of_step
from rljob_trainer.faults import NO_FAULTS, Faults
from rljob_trainer.gang import choose_device
from rljob_trainer.metrics import METRICS_FILE_NAME, MetricsLog, StepTiming, write_progress
from rljob_trainer.state import RNGState, TrainState
from rljob_trainer.stop import PendingMax, StopRequest, agree_max
from rljob_trainer.task import BOS, AdditionTask, CharTokenizer

log = logging.getLogger(__name__)

EXIT_OK = 0


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    device: torch.device
    warm: bool = False  # the group is the trainer's own (rljob_trainer.gang): ranks may hold


@dataclass(frozen=True)
class Rollout:
    """This rank's share of a step: prompt + completion sequences, scored and normalised."""

    sequences: torch.Tensor  # [prompts x group_size, prompt_len + max_new_tokens]
    prompt_len: int
    mask: torch.Tensor  # completion tokens up to and including EOS
    rewards: torch.Tensor
    advantages: torch.Tensor


class _Abandoned(Exception):
    """Raised inside a rollout once the ranks agreed to abandon it; the loop catches it."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.name)
        self.decision = decision


def agree_on_metrics(
    local: tuple[float, float, float, float, float] | None,
    reporters: int,
    grad_norm: float,
    lr: float,
) -> dict[str, float]:
    """The step's metrics as every rank sees them: (loss, reward, accuracy, kl, clip_frac)
    averaged over the `reporters` ranks that pass theirs (None: this rank does not report)."""
    summed = torch.tensor(local or (0.0,) * 5, dtype=torch.float64)
    dist.all_reduce(summed, op=dist.ReduceOp.SUM)
    loss, reward, accuracy, kl, clip_frac = (summed / reporters).tolist()
    return {
        "loss": loss,
        "reward": reward,
        "accuracy": accuracy,
        "kl": kl,
        "clip_frac": clip_frac,
        "grad_norm": grad_norm,
        "lr": lr,
    }


def init_distributed(device_pref: str) -> DistEnv:
    """Join torchrun's process group, or make a one-rank group when started without torchrun."""
    chosen = choose_device(device_pref)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(chosen.backend)
    else:
        dist.init_process_group(chosen.backend, store=dist.HashStore(), rank=0, world_size=1)
    return DistEnv(dist.get_rank(), dist.get_world_size(), chosen.device)


def set_deterministic(device: torch.device) -> None:
    """Deterministic kernels: on CPU strictly; on CUDA with warnings where PyTorch has none.

    On CUDA, scaled_dot_product_attention would pick the memory-efficient kernel, whose
    backward is not deterministic (PyTorch only warns, on an H200 here); its math kernel is.
    """
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.cuda.enable_mem_efficient_sdp(False)
        torch.backends.cuda.enable_cudnn_sdp(False)
    torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")


def _attempt() -> int | None:
    value = os.environ.get(contract.ENV_ATTEMPT)
    return int(value) if value else None


class Trainer(ABC):
    """The loop. A backend builds its model, optimizer and `checkpoints` in its constructor,
    calls `set_up_state` for the rest of what a checkpoint holds, and implements `train_step`."""

    can_hold = False  # whether a rank keeps its state across a warm restart (rejoined)
    checkpoints: CheckpointManager
    train_state: TrainState
    rng: RNGState
    sampler: PromptSampler
    generator: torch.Generator  # sampling, checkpointed with `rng`

    def __init__(self, cfg: TrainerConfig, env: DistEnv, faults: Faults = NO_FAULTS) -> None:
        self.cfg = cfg
        self.env = env
        self.faults = faults
        if cfg.runner.deterministic:
            set_deterministic(env.device)
        self.tokenizer = CharTokenizer()
        self.task = AdditionTask(cfg.data.max_operand, cfg.data.format_reward)
        self.checkpoint_dir = Path(str(cfg.runner.checkpoint_dir))
        self.attempt = _attempt()
        run_file = warm.run_file_from_env(os.environ) if env.warm else None
        self.stop = StopRequest(
            cfg.runner.checkpoint_request_file,
            partial(warm.newer_attempt_named, run_file, self.attempt) if run_file else None,
        )
        self.notice_budget = notice_budget(cfg.runner.grace_seconds, os.environ)
        self.step_clock = progress.StepClock()  # the attempt's first and latest step, timed
        # This attempt's own measurements, for the deadline.
        self.rollout_timing = StepTiming()
        self.update_timing = StepTiming()
        self._rollout_started = self._rollout_ended = 0.0
        self._stop_agreed_at: float | None = None
        # The sampler and random state at the start of the step's rollout.
        self._rewind_point: tuple[dict[str, Any], dict[str, Any]] | None = None
        self._vote_in_flight: PendingMax | None = None  # the rollout's last token's vote
        self.held_step: int | None = None  # the step this rank kept in memory (rejoined)

    def set_up_state(self, data_rank: int, data_ranks: int, model_config: dict[str, Any]) -> None:
        """The prompt sampler of this data-parallel rank, the sampling generator, the per-rank
        random state and the train state: the same in every backend."""
        runner = self.cfg.runner
        self.sampler = PromptSampler(
            self.task.num_examples, self.cfg.data.prompts_per_step, runner.seed, data_rank,
            data_ranks,
        )  # fmt: skip
        self.generator = torch.Generator(device=self.env.device)
        self.rng = RNGState(data_rank, runner.seed, self.generator)
        self.train_state = TrainState(model_config)

    @abstractmethod
    def train_step(self) -> dict[str, float]:
        """One GRPO step; the metrics as every rank agrees on them."""

    def rejoined(self, cfg: TrainerConfig, env: DistEnv) -> Trainer:
        """This rank's trainer in a new attempt's group `env`, with the state it holds (a
        backend that can_hold implements it)."""
        raise NotImplementedError(f"{type(self).__name__} cannot keep its state")

    def keep_from(self, held: Trainer, random_states: dict[str, Any]) -> None:
        """Take over what every backend keeps alike from the rank's `held` trainer: the
        sampler, the step, and every random generator as `random_states` (taken from `held`
        before building this trainer drew from them). The backend takes its model, optimizer
        and scheduler."""
        self.sampler.load_state_dict(held.sampler.state_dict())
        self.restore_random_states(random_states)
        self.train_state.step = held.train_state.step
        self.held_step = held.train_state.step

    def random_states(self) -> dict[str, Any]:
        """Every random generator this rank draws from (a backend adds its own)."""
        return self.rng.state_dict()

    def restore_random_states(self, states: dict[str, Any]) -> None:
        self.rng.load_state_dict(states)

    def rollout(self, next_token_logits: Callable[[torch.Tensor], torch.Tensor]) -> Rollout:
        """Take this rank's prompts of the step, sample `group_size` completions of each with
        the policy's `next_token_logits`, score them and normalise within each group.

        The step's first act: it keeps the sampler and random state first, to rewind to, and
        the ranks check before each token whether a notice makes them abandon the step."""
        algo = self.cfg.algorithm
        device = self.env.device
        self._rewind_point = (self.sampler.state_dict(), self.random_states())
        self._rollout_started = time.perf_counter()
        indices = self.sampler.next_local_batch()
        prompts = torch.tensor(
            [[BOS, *self.tokenizer.encode(self.task.prompt(i))] for i in indices], device=device
        ).repeat_interleave(algo.group_size, dim=0)
        completions = grpo.sample_completions(
            next_token_logits,
            prompts,
            algo.max_new_tokens,
            algo.temperature,
            self.generator,
            before_token=self._before_token,
        )
        self._abandon_if_agreed()  # on the last token's vote
        self._rollout_ended = time.perf_counter()
        self.rollout_timing.add(self._rollout_ended - self._rollout_started)
        answers = [self.task.answer(i) for i in indices for _ in range(algo.group_size)]
        rewards = torch.tensor(
            [
                self.task.reward(c, a, self.tokenizer)
                for c, a in zip(completions.tolist(), answers, strict=True)
            ],
            device=device,
        )
        return Rollout(
            sequences=torch.cat([prompts, completions], dim=1),
            prompt_len=prompts.shape[1],
            mask=grpo.completion_mask(completions),
            rewards=rewards,
            advantages=grpo.group_advantages(rewards.view(-1, algo.group_size), algo.adv_eps).view(
                -1
            ),
        )

    def _before_token(self, tokens_done: int) -> None:
        """Abandon the rollout if any rank's vote before the previous token says so, then
        post this token's vote, which the ranks read before the next."""
        self._abandon_if_agreed()
        self._vote_in_flight = PendingMax([self._decide(Phase.ROLLOUT, tokens_done)])
        self.faults.before_token(self.train_state.step + 1)

    def _abandon_if_agreed(self) -> None:
        """Read the vote in flight, if any: raise _Abandoned where a rank's says stop."""
        vote, self._vote_in_flight = self._vote_in_flight, None
        agreed = Decision(vote.result()[0]) if vote is not None else Decision.GO_ON
        if agreed != Decision.GO_ON:
            self._stop_agreed()
            raise _Abandoned(agreed)

    def _decide(self, phase: Phase, tokens_done: int = 0) -> Decision:
        """This rank's vote: GO_ON without a notice, else the deadline's decision."""
        if self.stop.reason() is None:
            return Decision.GO_ON
        now = time.monotonic()
        assert self.stop.noticed_at is not None  # set with the reason
        deadline = notice_deadline(self.stop.noticed_at, self.notice_budget,
                                   self.stop.node_ends_at, self.stop.node_told_at)  # fmt: skip
        step_rest = None
        if phase is Phase.ROLLOUT:
            step_rest = estimate_rest_of_step(
                time.perf_counter() - self._rollout_started,
                tokens_done,
                self.cfg.algorithm.max_new_tokens,
                self.rollout_timing.mean,
                self.update_timing.mean,
            )
        return decide(
            Situation(
                now=now,
                deadline=deadline,
                phase=phase,
                step_rest=step_rest,
                save_seconds=self.checkpoints.save_seconds,
                last_finished=self.train_state.step,
                newest_saved=self._newest_saved(),
            )
        )

    def _newest_saved(self) -> int:
        saved = self.checkpoints.saved_step
        return 0 if saved is None else saved  # a fresh start needs no checkpoint of step 0

    def _stop_agreed(self) -> None:
        if self._stop_agreed_at is None:
            self._stop_agreed_at = time.monotonic()

    def _rewind(self) -> None:
        """Back to the step's start: the state at the end of the last finished step."""
        assert self._rewind_point is not None
        sampler_state, random_states = self._rewind_point
        self.sampler.load_state_dict(sampler_state)
        self.restore_random_states(random_states)

    def step_boundary(self, vote: Decision) -> Decision:
        """One all_reduce: the largest decision of any rank (GO_ON: nobody stops), and whether
        an async save is still running anywhere; seal it once it finished on every rank."""
        agreed, save_running = agree_max([vote, int(not self.checkpoints.local_done())])
        if self.checkpoints.unsealed and not save_running:
            self.checkpoints.seal_agreed()
        if agreed != Decision.GO_ON:
            self._stop_agreed()
        return Decision(agreed)

    def _start(self) -> int:
        runner = self.cfg.runner
        folder = self.checkpoints.resolve_resume_dir(runner.resume_dir, runner.auto_resume)
        anyone_holds = self.env.warm and agree_max([int(self.held_step is not None)])[0] > 0
        if folder is None:
            if anyone_holds:
                raise CheckpointError(
                    "a rank holds the state of step "
                    f"{self.held_step}, but this run names no checkpoint"
                )
            self.rng.reseed(0)
            log.info("starting from scratch (no checkpoint in %s)", self.checkpoint_dir)
            step = 0
        elif anyone_holds:  # each rank alone: a rank that holds the step reads nothing
            step = self.checkpoints.load(folder, runner.allow_world_size_change,
                                         kept=self.held_step, collective=False)  # fmt: skip
            if step == self.held_step:
                log.warning("resumed at step %d from the state this rank kept (a warm restart; "
                            "%s holds the same)", step, folder)  # fmt: skip
            else:
                log.info("resumed from %s at step %d", folder, step)
        else:
            step = self.checkpoints.load(folder, runner.allow_world_size_change)
            log.info("resumed from %s at step %d", folder, step)
        expected = os.environ.get(contract.ENV_RESUME_STEP)
        if expected and folder is not None and int(expected) != step:
            raise CheckpointError(
                f"{contract.ENV_RESUME_STEP}={expected} but {folder} holds step {step}"
            )
        self.train_state.step = step
        return step

    def train(self) -> int:
        """Run to runner.max_steps; return the process exit code."""
        runner = self.cfg.runner
        step = self._start()
        rank0 = self.env.rank == 0
        metrics = None
        if rank0:
            metrics = MetricsLog(Path(runner.experiment_dir) / METRICS_FILE_NAME, step)
        timing = StepTiming()
        first = step
        while step < runner.max_steps:
            started = time.perf_counter()
            try:
                record = self.train_step()
            except _Abandoned as abandoned:
                self._rewind()
                if abandoned.decision is Decision.SAVE:
                    self.checkpoints.save(step)
                return self._stop_on_request(step, abandoned.decision, timing)
            self.update_timing.add(time.perf_counter() - self._rollout_ended)
            step += 1
            self.train_state.step = step
            if step == first + 1:  # this container's first step: its pod turns Ready
                progress.mark_trained()
            decision = self.step_boundary(self._decide(Phase.BOUNDARY))
            stop = decision is not Decision.GO_ON
            periodic = step % runner.save_interval == 0 and decision is not Decision.NO_TIME
            stall = 0.0
            if decision is Decision.SAVE or periodic or step == runner.max_steps:
                stall = self.checkpoints.save(step)
            self.step_clock.stepped()
            if rank0:
                assert metrics is not None
                entry = {"step": step, **record, "time": self.step_clock.last}
                entry["step_time"] = timing.add(time.perf_counter() - started)
                entry["ckpt_stall"] = stall
                if self.attempt is not None:
                    entry["attempt"] = self.attempt
                metrics.write(entry)
                write_progress(
                    self.checkpoint_dir, step, self.attempt, progress.RUNNING, timing.mean,
                    self.checkpoints.save_seconds, self.step_clock,
                )  # fmt: skip
                log.info(
                    "step %d/%d loss=%.4f reward=%.3f accuracy=%.3f kl=%.4f",
                    step,
                    runner.max_steps,
                    record["loss"],
                    record["reward"],
                    record["accuracy"],
                    record["kl"],
                )
            if stop and step < runner.max_steps:  # at the last step, finishing wins
                return self._stop_on_request(step, decision, timing)
        progress.unmark_trained()  # the last step is done: ending is not training
        self._end(step, progress.FINISHED, timing.mean)
        log.info("finished at step %d", step)
        return EXIT_OK

    def _stop_on_request(self, step: int, decision: Decision, timing: StepTiming) -> int:
        self._end(step, progress.CHECKPOINTED_ON_REQUEST, timing.mean, decision)
        return contract.EXIT_CHECKPOINTED_ON_REQUEST

    def _end(
        self, step: int, status: str, step_seconds: float | None, decision: Decision | None = None
    ) -> None:
        """Seal the last checkpoint and record the outcome before any rank may exit; on a stop
        request, tell the operator which decision it was."""
        if decision is Decision.SAVE:
            self.faults.before_stop_seal(self.env.rank)
        self.checkpoints.wait()
        if self.env.rank == 0:
            write_progress(
                self.checkpoint_dir, step, self.attempt, status, step_seconds,
                clock=self.step_clock,
            )  # fmt: skip
        span = self.step_clock.span
        if status == progress.FINISHED and span and _local_rank() == 0:
            tell_the_operator(progress.trained_line(*span))  # times the attempt's training
        if decision is not None:
            noticed_at = self.stop.noticed_at or self._stop_agreed_at or time.monotonic()
            detail = describe(decision, step, self._newest_saved(), time.monotonic() - noticed_at)
            log.warning(
                "stopping on request (%s): %s, exiting with code %d",
                self.stop.reason() or "another rank's request",
                detail,
                contract.EXIT_CHECKPOINTED_ON_REQUEST,
            )
            if _local_rank() == 0:
                tell_the_operator(f"{contract.CHECKPOINTED_ON_REQUEST_MESSAGE}: {detail}")
        self.checkpoints.finish()


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def tell_the_operator(message: str) -> None:
    """Write the container's termination message: torchrun hides our exit code, this it can't."""
    explicit = os.environ.get(contract.ENV_TERMINATION_LOG)
    path = Path(explicit or contract.DEFAULT_TERMINATION_LOG)
    if not explicit and not path.exists():  # outside a container: nobody to tell
        return
    try:
        with path.open("w") as fh:
            fh.write(message + "\n")
    except OSError:  # not in a container: nobody to tell
        log.debug("no termination log at %s", path)
