"""A Ray driver shaped like verl's and RLinf's trainers, for the Ray launcher's e2e tests.

    python ray_trainer.py verl  trainer.default_local_dir=DIR trainer.total_training_steps=16 ...
    python ray_trainer.py rlinf runner.output_dir=DIR runner.experiment_name=run ...

What is real: it is a Ray program run once, on the head, against the gang's Ray cluster
(`ray.init()` finds it through RAY_ADDRESS); it places one actor per Ray node with a
STRICT_SPREAD placement group, and the actors train a small float64 model together with
torch.distributed over gloo (gradients all-reduced, Adam), drawing from torch's global
RNG every step so that resuming needs the saved RNG state. Overrides are read with
OmegaConf, and the resume switches are the frameworks' own: verl's
`trainer.resume_mode=resume_path trainer.resume_from_path=<dir>`, RLinf's
`runner.resume_dir=<dir>`; each takes the step from the folder's name, as they do.

What it fakes: the RL algorithm (a fixed regression task stands in for GRPO) and the
frameworks' checkpoint code. It writes their layouts in their order:
- verl FSDP: every rank `actor/{model,optim,extra_state}_world_size_W_rank_R.pt`, rank 0
  `actor/fsdp_config.json` and `actor/huggingface/config.json`; then the driver `data.pt`,
  then the run's `latest_checkpointed_iteration.txt`;
- RLinf FSDP: all ranks together `actor/dcp_checkpoint/` (torch.distributed.checkpoint),
  then the driver `data/data.pt`.

A restarted attempt (RLJOB_ATTEMPT > 0) that was not given the framework's switch exits 3,
so the tests prove that the switch, not rljob's environment, made it resume.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import ray
from omegaconf import OmegaConf
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

DEFAULTS = {
    "verl": {
        "trainer": {
            "nnodes": 2, "total_training_steps": 16, "save_freq": 4, "default_local_dir": "???",
            "resume_mode": "auto", "resume_from_path": None, "seconds_per_step": 0.3,
        },
    },
    "rlinf": {
        "cluster": {"num_nodes": 2},
        "runner": {
            "output_dir": "???", "experiment_name": "run", "max_steps": 16, "save_interval": 4,
            "resume_dir": None, "seconds_per_step": 0.3,
        },
    },
}  # fmt: skip
BATCH, FEATURES = 8, 6
TRACKER = "latest_checkpointed_iteration.txt"


# --------------------------------------------------------------------------- the model
def build(torch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    ).double()
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def batch(torch, step: int, rank: int, world: int):
    """The step's data, the same whoever trains it; each rank takes its rows."""
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, FEATURES, generator=generator, dtype=torch.float64)
    y = x.sum(dim=1, keepdim=True).sin()
    return x[rank::world], y[rank::world]


@ray.remote(num_cpus=1)
class Trainer:
    """One rank: a replica of the model, kept in step with the others by all-reduce."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def address(self) -> tuple[str, int]:
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def where(self) -> dict[str, Any]:
        return {"node": ray.get_runtime_context().get_node_id(),
                "node_rank": os.environ.get("RLINF_NODE_RANK")}  # fmt: skip

    def setup(self, master: tuple[str, int]) -> None:
        import torch
        import torch.distributed as dist

        dist.init_process_group(
            "gloo", init_method=f"tcp://{master[0]}:{master[1]}", rank=self.rank,
            world_size=self.world,
        )  # fmt: skip
        self.torch, self.dist = torch, dist
        self.model, self.optimizer = build(torch)

    def train_step(self, step: int) -> float:
        torch = self.torch
        x, y = batch(torch, step, self.rank, self.world)
        noise = 1e-3 * torch.randn(y.shape, dtype=torch.float64)  # the global RNG
        loss = torch.nn.functional.mse_loss(self.model(x), y + noise)
        self.optimizer.zero_grad()
        loss.backward()
        for param in self.model.parameters():
            self.dist.all_reduce(param.grad)
            param.grad /= self.world
        self.optimizer.step()
        total = loss.detach().clone()
        self.dist.all_reduce(total)
        return float(total) / self.world

    # ------------------------------------------------------------ verl's FSDP layout
    def save_verl(self, actor: str) -> None:
        torch, folder = self.torch, Path(actor)
        folder.mkdir(parents=True, exist_ok=True)
        tag = f"world_size_{self.world}_rank_{self.rank}"
        torch.save(self.model.state_dict(), folder / f"model_{tag}.pt")
        torch.save(self.optimizer.state_dict(), folder / f"optim_{tag}.pt")
        torch.save({"lr_scheduler": None, "rng": torch.get_rng_state()},
                   folder / f"extra_state_{tag}.pt")  # fmt: skip
        if self.rank == 0:
            (folder / "fsdp_config.json").write_text(
                json.dumps({"FSDP_version": 2, "world_size": self.world})
            )
            (folder / "huggingface").mkdir(exist_ok=True)
            (folder / "huggingface" / "config.json").write_text('{"model_type": "tiny"}')
        self.dist.barrier()

    def load_verl(self, actor: str) -> None:
        torch, folder = self.torch, Path(actor)
        tag = f"world_size_{self.world}_rank_{self.rank}"
        self.model.load_state_dict(torch.load(folder / f"model_{tag}.pt", weights_only=True))
        self.optimizer.load_state_dict(torch.load(folder / f"optim_{tag}.pt", weights_only=True))
        torch.set_rng_state(torch.load(folder / f"extra_state_{tag}.pt", weights_only=True)["rng"])

    # ------------------------------------------------------------ RLinf's FSDP layout
    def _dcp_state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optim = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optim, "rng": self.torch.get_rng_state()}

    def save_rlinf(self, actor: str) -> None:
        import torch.distributed.checkpoint as dcp

        dcp.save(self._dcp_state(), checkpoint_id=str(Path(actor) / "dcp_checkpoint"))

    def load_rlinf(self, actor: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._dcp_state()
        dcp.load(state, checkpoint_id=str(Path(actor) / "dcp_checkpoint"))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])  # fmt: skip
        self.torch.set_rng_state(state["rng"])


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
                "switch": t.resume_mode == "resume_path"}  # fmt: skip
    r = cfg.runner
    return {"nnodes": cfg.cluster.num_nodes, "steps": r.max_steps, "every": r.save_interval,
            "dir": Path(r.output_dir) / r.experiment_name / "checkpoints", "resume": r.resume_dir,
            "pause": r.seconds_per_step, "switch": r.resume_dir is not None}  # fmt: skip


def save(framework: str, trainers, root: Path, step: int) -> None:
    folder = root / f"global_step_{step}"
    ray.get([getattr(t, f"save_{framework}").remote(str(folder / "actor")) for t in trainers])
    import torch

    if framework == "verl":
        torch.save({"consumed": step * BATCH}, folder / "data.pt")
        (root / TRACKER).write_text(str(step))  # the tracker last, as verl's trainer does
    else:
        (folder / "data").mkdir(exist_ok=True)
        torch.save({"consumed": step * BATCH}, folder / "data" / "data.pt")  # last, as RLinf
    print(f"ray_trainer: saved {folder}", flush=True)


def main(argv: list[str]) -> int:
    framework, overrides = argv[0], argv[1:]
    cfg = OmegaConf.merge(OmegaConf.create(DEFAULTS[framework]), OmegaConf.from_dotlist(overrides))
    s = settings(framework, cfg)
    if int(os.environ.get("RLJOB_ATTEMPT", "0")) > 0 and not s["switch"]:
        print("ray_trainer: a restarted attempt was not given the resume switch", flush=True)
        return 3
    ray.init(logging_level="WARNING")
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
    start = 0
    if s["resume"]:
        folder = str(s["resume"])
        start = int(folder.split("global_step_")[-1])  # as both frameworks read it
        ray.get([getattr(t, f"load_{framework}").remote(f"{folder}/actor") for t in trainers])
        print(f"ray_trainer: resumed from {folder} at step {start}", flush=True)
    for step in range(start + 1, s["steps"] + 1):
        time.sleep(s["pause"])
        losses = ray.get([t.train_step.remote(step) for t in trainers])
        print(f"ray_trainer: step {step}/{s['steps']} loss {losses[0]!r}", flush=True)
        if step % s["every"] == 0 or step == s["steps"]:
            save(framework, trainers, s["dir"], step)
    print("ray_trainer: finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
