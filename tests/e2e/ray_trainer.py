"""A Ray driver shaped like verl's and RLinf's trainers, for the Ray launcher's e2e tests.

    python ray_trainer.py verl  trainer.default_local_dir=DIR trainer.total_training_steps=16 ...
    python ray_trainer.py rlinf runner.output_dir=DIR runner.experiment_name=run ...

What is real:
- a Ray program run once, on the head, against the gang's Ray cluster (`ray.init()` finds it
  through RAY_ADDRESS), placing one actor per Ray node with a STRICT_SPREAD placement group;
- the actors train a tiny Qwen2 causal LM (transformers, random weights made here: no hub)
  sharded with FSDP2 over a gloo process group across the pods, drawing from torch's global
  RNG every step (token masking), so that resuming needs the saved RNG state;
- the checkpoints of the actors are written and read by the frameworks' own code:
  verl's `FSDPCheckpointManager` (`actor/{model,optim,extra_state}_world_size_W_rank_R.pt`,
  `fsdp_config.json`, `huggingface/`) and RLinf's `FSDP2Strategy.save_checkpoint` /
  `load_checkpoint` (`actor/dcp_checkpoint/`, `actor/model_state_dict/full_weights.pt`);
- overrides read with OmegaConf, and the frameworks' resume switches: verl's
  `trainer.resume_mode=resume_path trainer.resume_from_path=<dir>`, RLinf's
  `runner.resume_dir=<dir>`, each taking the step from the folder's name, as they do;
- the frameworks' own step-end decisions, which rljob's bridge hooks: RLinf's reasoning
  runner's (its `Timer` and `check_progress`, save, then stop on the time limit) in the
  driver, and verl's in a TaskRunner actor, a Ray worker, as verl runs it: with
  `trainer.use_v1=true` (verl 0.9's default) verl's own V1 `PPOTrainer.step` runs each
  step, then the save and `Tracking.log` as its `fit` orders them; with `false`, legacy
  `RayPPOTrainer.fit`'s order (`should_save_ckpt_esi` through
  `verl.trainer.ppo.ray_trainer`, the save, `Tracking.log`).

What it fakes:
- the RL algorithm: next-token loss on fixed random tokens stands in for GRPO/PPO;
- the frameworks' trainers around the checkpoint managers and step-end decisions: this
  loop is a copy of their control flow, and writes what they write after the actors, in
  their order (verl: `data.pt`, then the run's `latest_checkpointed_iteration.txt`; RLinf:
  `data/data.pt`); verl's V1 `PPOTrainer` is subclassed with none of its set-up (worker
  groups, rollout servers, TransferQueue): its `step` calls this file's rollout-and-update,
  and its `_save_checkpoint` this file's save;
- a slow save, when the test asks for one (`seconds_per_deadline_save`): a pause between
  the actors' shards and the files the frameworks write last, in the saves made under a
  deadline (verl's ESI; with verl's V1 trainer, every save after the pod's notice; RLinf's
  time limit);
- RLinf's accelerator platform: RLinf knows no CPU platform, so the actors give its Worker
  one whose synchronize/empty_cache are no-ops (`cpu_platform`).

A restarted attempt (RLJOB_ATTEMPT > 0) that was not given the framework's switch exits 3,
so the tests prove that the switch, not rljob's environment, made it resume.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import ray
import rljob_contract as contract
from omegaconf import OmegaConf
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

DEFAULTS = {
    "verl": {
        "trainer": {
            "nnodes": 2, "total_training_steps": 16, "save_freq": 4, "default_local_dir": "???",
            "resume_mode": "auto", "resume_from_path": None, "seconds_per_step": 1.0,
            "seconds_per_deadline_save": 0, "use_v1": True,
        },
    },
    "rlinf": {
        "cluster": {"num_nodes": 2},
        "runner": {
            "output_dir": "???", "experiment_name": "run", "max_steps": 16, "save_interval": 4,
            "resume_dir": None, "seconds_per_step": 1.0, "seconds_per_deadline_save": 0,
        },
    },
}  # fmt: skip
BATCH, SEQUENCE, VOCAB = 4, 8, 64
TRACKER = "latest_checkpointed_iteration.txt"


def cpu_platform() -> types.SimpleNamespace:
    """The accelerator platform RLinf's checkpoint code calls, for a CPU-only actor."""
    return types.SimpleNamespace(
        is_available=lambda: False, synchronize=lambda: None, ipc_collect=lambda: None,
        empty_cache=lambda: None,
    )  # fmt: skip


@ray.remote(num_cpus=1)
class Trainer:
    """One rank: its FSDP2 shard of the model, and the framework's checkpoint manager."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def address(self) -> tuple[str, int]:
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def where(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(),
                "node_rank": os.environ.get("NODE_RANK")}  # rljob's Ray launcher sets it  # fmt: skip

    def setup(self, master: tuple[str, int]) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from transformers import Qwen2Config, Qwen2ForCausalLM

        dist.init_process_group(
            "gloo", init_method=f"tcp://{master[0]}:{master[1]}", rank=self.rank,
            world_size=self.world,
        )  # fmt: skip
        # Seed every generator the frameworks save (torch, numpy, random), as their trainers do.
        torch.manual_seed(0)
        np.random.seed(0)
        random.seed(0)
        config = Qwen2Config(
            vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=SEQUENCE,
        )  # fmt: skip
        self.torch, self.dist = torch, dist
        self.model = Qwen2ForCausalLM(config)
        fully_shard(self.model, mesh=init_device_mesh("cpu", (self.world,)))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1 / (1 + s))

    def train_step(self, step: int) -> float:
        torch = self.torch
        tokens = torch.randint(0, VOCAB, (BATCH, SEQUENCE),
                               generator=torch.Generator().manual_seed(1000 + step))  # fmt: skip
        ids = tokens[self.rank :: self.world]
        labels = ids.clone()
        labels[torch.rand(labels.shape) < 0.2] = -100  # the global RNG
        loss = self.model(input_ids=ids, labels=labels).loss
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        total = loss.detach().clone()
        self.dist.all_reduce(total)
        return float(total) / self.world

    # ------------------------------------------------------------ verl's own manager
    def _verl_manager(self):
        from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

        return FSDPCheckpointManager(
            self.model, self.optimizer, self.scheduler, processing_class=None,
            checkpoint_config=OmegaConf.create({}),
        )  # fmt: skip

    def save_verl(self, actor: str, step: int) -> None:
        self._verl_manager().save_checkpoint(actor, global_step=step)

    def load_verl(self, actor: str) -> None:
        self._verl_manager().load_checkpoint(actor)

    # ------------------------------------------------------------ RLinf's own strategy
    def _rlinf_strategy(self):
        from rlinf.hybrid_engines.fsdp.strategy.fsdp2 import FSDP2Strategy
        from rlinf.scheduler.worker.worker import Worker

        Worker.torch_platform = cpu_platform()
        return FSDP2Strategy

    def save_rlinf(self, actor: str, step: int) -> None:
        self._rlinf_strategy().save_checkpoint(self.model, self.optimizer, self.scheduler, actor)

    def load_rlinf(self, actor: str) -> None:
        self._rlinf_strategy().load_checkpoint(self.model, self.optimizer, self.scheduler, actor)


# --------------------------------------------------------------------------- the driver
def settings(framework: str, cfg) -> dict[str, Any]:
    """The knobs of either framework under one set of names."""
    if framework == "verl":
        t = cfg.trainer
        resume = t.resume_from_path if t.resume_mode == "resume_path" else None
        if t.resume_mode == "auto":  # verl's default: the run's tracker
            tracker = Path(t.default_local_dir) / TRACKER
            if tracker.exists():
                resume = f"{t.default_local_dir}/global_step_{tracker.read_text().strip()}"
        return {"nnodes": t.nnodes, "steps": t.total_training_steps, "every": t.save_freq,
                "dir": Path(t.default_local_dir), "resume": resume, "pause": t.seconds_per_step,
                "switch": t.resume_mode == "resume_path",
                "slow_save": t.seconds_per_deadline_save, "v1": t.use_v1}  # fmt: skip
    r = cfg.runner
    return {"nnodes": cfg.cluster.num_nodes, "steps": r.max_steps, "every": r.save_interval,
            "dir": Path(r.output_dir) / r.experiment_name / "checkpoints", "resume": r.resume_dir,
            "pause": r.seconds_per_step, "switch": r.resume_dir is not None,
            "slow_save": r.seconds_per_deadline_save}  # fmt: skip


def save(framework: str, trainers, s: dict[str, Any], step: int, deadline: bool) -> None:
    """`deadline`: the framework saves because a deadline is near (verl's ESI, RLinf's time
    limit), as it does on rljob's notice."""
    root = s["dir"]
    folder = root / f"global_step_{step}"
    ray.get([getattr(t, f"save_{framework}").remote(str(folder / "actor"), step) for t in trainers])
    if deadline:
        time.sleep(s["slow_save"])  # the test's knob: a save on notice too slow for the grace
    import torch

    if framework == "verl":
        torch.save({"consumed": step * BATCH}, folder / "data.pt")  # verl's trainer, after actor/
        (root / TRACKER).write_text(str(step))  # the tracker last, as verl's trainer does
    else:
        (folder / "data").mkdir(exist_ok=True)
        torch.save({"consumed": step * BATCH}, folder / "data" / "data.pt")  # last, as RLinf
    print(f"ray_trainer: saved {folder}", flush=True)


def start_trainers(s: dict[str, Any]) -> list:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    print(f"ray_trainer: {len(nodes)} Ray nodes", flush=True)
    group = placement_group([{"CPU": 1}] * s["nnodes"], strategy="STRICT_SPREAD")
    ray.get(group.ready(), timeout=120)
    trainers = [
        Trainer.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, rank)).remote(
            rank, s["nnodes"]
        )
        for rank in range(s["nnodes"])
    ]
    places = ray.get([t.where.remote() for t in trainers])
    print(f"ray_trainer: actors on {json.dumps(places)}", flush=True)
    master = ray.get(trainers[0].address.remote())
    ray.get([t.setup.remote(master) for t in trainers])
    return trainers


def resume(framework: str, s: dict[str, Any], trainers) -> int:
    if not s["resume"]:
        return 0
    folder = str(s["resume"])
    start = int(folder.split("global_step_")[-1])  # as both frameworks read it
    ray.get([getattr(t, f"load_{framework}").remote(f"{folder}/actor") for t in trainers])
    print(f"ray_trainer: resumed from {folder} at step {start}", flush=True)
    return start


def train(trainers, step: int, s: dict[str, Any]) -> None:
    time.sleep(s["pause"])
    losses = ray.get([t.train_step.remote(step) for t in trainers])
    print(f"ray_trainer: step {step}/{s['steps']} loss {losses[0]!r}", flush=True)


def rlinf_loop(s: dict[str, Any], trainers, start: int) -> None:
    """RLinf's reasoning runner's control flow, on its own Timer and check_progress."""
    from rlinf.utils.runner_utils import check_progress
    from rlinf.utils.timers import Timer

    run_timer = Timer(None)  # RLinf's default: no time limit
    run_timer.start_time()
    for step in range(start + 1, s["steps"] + 1):
        train(trainers, step, s)
        run_time_exceeded = run_timer.is_finished()
        _, save_model, is_train_end = check_progress(
            step, s["steps"], 0, s["every"], 1.0, run_time_exceeded=run_time_exceeded
        )
        if save_model:
            save("rlinf", trainers, s, step, deadline=run_time_exceeded)
        if is_train_end:
            return
        if run_time_exceeded:
            print(f"ray_trainer: time limit reached at step {step}: stopping", flush=True)
            return


def verl_v1_trainer(s: dict[str, Any], trainers, start: int):
    """verl's V1 PPOTrainer over the actors: verl's own `step`, this file's rollout-and-update
    and save under it."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    class StandInV1Trainer(PPOTrainer):
        def __init__(self) -> None:  # none of verl's: no worker groups, servers or queue
            self.config = OmegaConf.create(
                {"data": {"train_batch_size": BATCH}, "trainer": {"save_freq": s["every"]}}
            )
            self.parameter_sync_step = 1
            self.global_steps, self.total_training_steps = start, s["steps"]

        def prepare_step(self) -> dict:
            return {}

        def _step_once(self, metrics: dict, timing_raw: dict, batch_size: int) -> KVBatchMeta:
            train(trainers, self.global_steps, s)
            return KVBatchMeta(keys=[str(self.global_steps)], tags=[{}], partition_id="train")

        def _save_checkpoint(self) -> None:
            # After the pod's notice, even the periodic save of a step races the grace.
            notice = os.environ.get(contract.ENV_NOTICE_FILE)
            save("verl", trainers, s, self.global_steps,
                 deadline=bool(notice) and Path(notice).exists())  # fmt: skip

        def on_step_end(self) -> None:
            pass

        def on_sample_end(self) -> None:
            pass

    return StandInV1Trainer()


@ray.remote(num_cpus=0)
class TaskRunner:
    """verl's TaskRunner: the trainer's loop runs in this Ray worker, not in the driver."""

    def run(self, s: dict[str, Any]) -> None:
        from verl.utils.tracking import Tracking

        print(f"ray_trainer: verl's loop on node {ray.get_runtime_context().get_node_id()}",
              flush=True)  # fmt: skip
        trainers = start_trainers(s)
        start = resume("verl", s, trainers)
        logger = Tracking(project_name="rljob", experiment_name="e2e", default_backend=[])
        if s["v1"]:
            self.fit_v1(s, verl_v1_trainer(s, trainers, start), logger)
        else:
            self.fit_legacy(s, trainers, start, logger)

    def fit_v1(self, s: dict[str, Any], trainer, logger) -> None:
        """V1 PPOTrainer.fit's order: step, the periodic save, the step's log."""
        while trainer.global_steps < s["steps"]:
            trainer.global_steps += 1
            step, began = trainer.global_steps, time.time()
            trainer.step({}, {})
            if s["every"] > 0 and (step >= s["steps"] or step % s["every"] == 0):
                trainer._save_checkpoint()
            logger.log(data={"timing_s/step": time.time() - began}, step=step)

    def fit_legacy(self, s: dict[str, Any], trainers, start: int, logger) -> None:
        """Legacy RayPPOTrainer.fit's order: the update, the ESI check, the save, the log."""
        # Through the trainer module's own name, as RayPPOTrainer.fit calls it.
        from verl.trainer.ppo import ray_trainer as verl_trainer

        max_steps_duration = 0.0
        for step in range(start + 1, s["steps"] + 1):
            began = time.time()
            train(trainers, step, s)
            is_last_step = step >= s["steps"]
            esi_close_to_expiration = verl_trainer.should_save_ckpt_esi(
                max_steps_duration=max_steps_duration, redundant_time=0
            )
            if s["every"] > 0 and (is_last_step or step % s["every"] == 0
                                   or esi_close_to_expiration):  # fmt: skip
                save("verl", trainers, s, step, deadline=esi_close_to_expiration)
            steps_duration = time.time() - began
            max_steps_duration = max(max_steps_duration, steps_duration)
            logger.log(data={"timing_s/step": steps_duration}, step=step)


def main(argv: list[str]) -> int:
    framework, overrides = argv[0], argv[1:]
    cfg = OmegaConf.merge(OmegaConf.create(DEFAULTS[framework]), OmegaConf.from_dotlist(overrides))
    s = settings(framework, cfg)
    if int(os.environ.get("RLJOB_ATTEMPT", "0")) > 0 and not s["switch"]:
        print("ray_trainer: a restarted attempt was not given the resume switch", flush=True)
        return 3
    ray.init(logging_level="WARNING")
    if framework == "verl":
        ray.get(TaskRunner.remote().run.remote(s))
    else:
        trainers = start_trainers(s)
        rlinf_loop(s, trainers, resume(framework, s, trainers))
    print("ray_trainer: finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
