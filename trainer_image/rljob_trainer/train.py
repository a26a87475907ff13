"""The training loop both backends share: resume, steps, checkpoints, stopping on request.

A backend (`rljob_trainer.fsdp.FsdpTrainer`, `rljob_trainer.megatron.trainer.MegatronTrainer`)
builds the model, optimizer and checkpoint format and runs one GRPO step; this loop decides
when to save, writes the metrics and progress.json, and at the end seals the last checkpoint
and tells the operator why it stopped. At each step boundary the ranks agree whether to stop
and whether an async save has finished everywhere, then maybe checkpoint.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import rljob_contract as contract
import torch
import torch.distributed as dist
from rljob_contract import progress

from rljob_trainer import grpo
from rljob_trainer.checkpoint import ENV_TEST_SLOW_STOP_SAVE, CheckpointError, CheckpointManager
from rljob_trainer.config import TrainerConfig
from rljob_trainer.data import PromptSampler
from rljob_trainer.metrics import METRICS_FILE_NAME, MetricsLog, StepTiming, write_progress
from rljob_trainer.state import RNGState, TrainState
from rljob_trainer.stop import StopRequest, agree_any
from rljob_trainer.task import BOS, AdditionTask, CharTokenizer

log = logging.getLogger(__name__)

EXIT_OK = 0


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    device: torch.device


@dataclass(frozen=True)
class Rollout:
    """This rank's share of a step: prompt + completion sequences, scored and normalised."""

    sequences: torch.Tensor  # [prompts x group_size, prompt_len + max_new_tokens]
    prompt_len: int
    mask: torch.Tensor  # completion tokens up to and including EOS
    rewards: torch.Tensor
    advantages: torch.Tensor


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
    use_cuda = device_pref == "cuda" or (device_pref == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("runner.device=cuda but CUDA is not available")
    if use_cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"  # gloo for the small CPU collectives and async saves
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return DistEnv(dist.get_rank(), dist.get_world_size(), device)


def set_deterministic(device: torch.device) -> None:
    """Deterministic kernels: on CPU strictly; on CUDA with warnings where PyTorch has none."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")


def _attempt() -> int | None:
    value = os.environ.get(contract.ENV_ATTEMPT)
    return int(value) if value else None


class Trainer:
    """The loop; a backend sets the attributes below and runs `train_step`."""

    checkpoints: CheckpointManager
    train_state: TrainState
    rng: RNGState
    sampler: PromptSampler
    generator: torch.Generator  # sampling, checkpointed with `rng`

    def __init__(self, cfg: TrainerConfig, env: DistEnv) -> None:
        self.cfg = cfg
        self.env = env
        if cfg.runner.deterministic:
            set_deterministic(env.device)
        self.tokenizer = CharTokenizer()
        self.task = AdditionTask(cfg.data.max_operand, cfg.data.format_reward)
        self.checkpoint_dir = Path(str(cfg.runner.checkpoint_dir))
        self.stop = StopRequest(cfg.runner.checkpoint_request_file)
        self.attempt = _attempt()

    def train_step(self) -> dict[str, float]:
        """One GRPO step; the metrics as every rank agrees on them."""
        raise NotImplementedError

    def rollout(self, next_token_logits: Callable[[torch.Tensor], torch.Tensor]) -> Rollout:
        """Take this rank's prompts of the step, sample `group_size` completions of each with
        the policy's `next_token_logits`, score them and normalise within each group."""
        algo = self.cfg.algorithm
        device = self.env.device
        indices = self.sampler.next_local_batch()
        prompts = torch.tensor(
            [[BOS, *self.tokenizer.encode(self.task.prompt(i))] for i in indices], device=device
        ).repeat_interleave(algo.group_size, dim=0)
        completions = grpo.sample_completions(
            next_token_logits, prompts, algo.max_new_tokens, algo.temperature, self.generator
        )
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

    def step_boundary(self, want_stop: bool) -> bool:
        """One all_reduce: whether any rank wants to stop, and whether an async save is still
        running anywhere; seal it once it finished on every rank."""
        stop, save_running = agree_any([want_stop, not self.checkpoints.local_done()])
        if self.checkpoints.unsealed and not save_running:
            self.checkpoints.seal_agreed()
        return stop

    def _start(self) -> int:
        runner = self.cfg.runner
        folder = self.checkpoints.resolve_resume_dir(runner.resume_dir, runner.auto_resume)
        if folder is None:
            self.rng.reseed(0)
            log.info("starting from scratch (no checkpoint in %s)", self.checkpoint_dir)
            step = 0
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
        while step < runner.max_steps:
            started = time.perf_counter()
            record = self.train_step()
            step += 1
            self.train_state.step = step
            reason = self.stop.reason()
            stop = self.step_boundary(reason is not None)
            stall = 0.0
            if stop or step % runner.save_interval == 0 or step == runner.max_steps:
                stall = self.checkpoints.save(step)
            if rank0:
                assert metrics is not None
                entry = {"step": step, **record, "time": time.time()}
                entry["step_time"] = timing.add(time.perf_counter() - started)
                entry["ckpt_stall"] = stall
                if self.attempt is not None:
                    entry["attempt"] = self.attempt
                metrics.write(entry)
                write_progress(
                    self.checkpoint_dir, step, self.attempt, progress.RUNNING, timing.mean
                )
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
                log.warning(
                    "stopping on request (%s): checkpointed step %d, exiting with code %d",
                    reason or "another rank's request",
                    step,
                    contract.EXIT_CHECKPOINTED_ON_REQUEST,
                )
                self._end(step, progress.CHECKPOINTED_ON_REQUEST, timing.mean)
                return contract.EXIT_CHECKPOINTED_ON_REQUEST
        self._end(step, progress.FINISHED, timing.mean)
        log.info("finished at step %d", step)
        return EXIT_OK

    def _end(self, step: int, status: str, step_seconds: float | None) -> None:
        """Seal the last checkpoint and record the outcome before any rank may exit."""
        slow = float(os.environ.get(ENV_TEST_SLOW_STOP_SAVE) or 0)
        if status == progress.CHECKPOINTED_ON_REQUEST and slow and self.env.rank == 0:
            log.warning(
                "test hook %s: the save on stop takes %.0f s more", ENV_TEST_SLOW_STOP_SAVE, slow
            )
            time.sleep(slow)
        self.checkpoints.wait()
        if self.env.rank == 0:
            write_progress(self.checkpoint_dir, step, self.attempt, status, step_seconds)
        if (
            status == progress.CHECKPOINTED_ON_REQUEST
            and int(os.environ.get("LOCAL_RANK", "0")) == 0
        ):
            tell_the_operator(contract.CHECKPOINTED_ON_REQUEST_MESSAGE + f" at step {step}")
        self.checkpoints.finish()


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


def run(cfg: TrainerConfig) -> int:
    env = init_distributed(cfg.runner.device)
    try:
        if cfg.runner.backend == "megatron":
            from rljob_trainer.megatron.trainer import MegatronTrainer

            return MegatronTrainer(cfg, env).train()
        from rljob_trainer.fsdp import FsdpTrainer

        return FsdpTrainer(cfg, env).train()
    finally:
        dist.destroy_process_group()
