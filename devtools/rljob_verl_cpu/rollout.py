"""A CPU rollout backend for verl 0.9.1, test support only (never shipped in an image).

verl's trainers generate through the agent loop, which calls rollout *servers*; the only
registered servers are vLLM, SGLang and TensorRT-LLM, all GPU inference engines. This module
registers a fourth under the name `rljob_cpu` (`actor_rollout_ref.rollout.name=rljob_cpu`)
through verl's own registries: `RolloutReplicaRegistry` (the replica, used by the agent
loop's `LLMServerManager`) and `_ROLLOUT_REGISTRY` (the `ServerAdapter` the hybrid
actor-rollout worker builds in `init_model`).

What it fakes, and what is real:
- the inference engine: each replica's server is one Ray actor holding a Hugging Face
  `AutoModelForCausalLM` in float32 on the CPU and sampling with a plain loop (KV cache,
  temperature, top-k, top-p, repetition penalty, stop on the model's eos ids). No batching,
  no HTTP server (the "server address" is a name, not a socket), no prefix cache, no
  multi-modal input; requests run one at a time.
- log-probs: the sampled token's log-probability under `log_softmax(logits / temperature)`
  (what verl's actor computes for the same token), before top-k/top-p filtering; under greedy
  (temperature 0) the log-probability of the raw logits.
- memory management: wake-up, sleep, KV-cache release/resume/clear and profiling are no-ops
  (there is no device memory to hand back); abort does not interrupt a running request (the
  requests are short and run to completion), so partial rollout is not supported.
- weight sync: only verl's `naive` checkpoint engine (hybrid mode, trainer and rollout in the
  same worker). The `ServerAdapter.update_weights` takes the trainer's (name, tensor) stream,
  and the rank that owns the replica's server sends the full state dict to it by a Ray call.

Reproducibility: each request samples with its own `torch.Generator`, seeded from
(`rollout.seed`, the weights' global step, the request id); not from a process-wide RNG or
the number of calls a process has served, and requests run one at a time, each alone (no
batch-dependent numerics). The weights' global step is what the trainer passed to the last
`update_weights` (step N's rollout runs on the weights of step N-1, both in an uninterrupted
run and in one resumed from `global_step_{N-1}`). The request id names the sample only with
`actor_rollout_ref.rollout.full_determinism=True` (verl then sends "det-<priority>" instead
of a fresh uuid) and the agent loop `rljob_cpu_single_turn` (see `agent_loop`: verl's V1
trainer leaves every priority 0). Otherwise the samples differ run to run, or are equal
within a GRPO group.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from typing import Any

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.plugin.platform import get_platform
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, BaseRollout
from verl.workers.rollout.replica import (
    RolloutMode,
    RolloutReplica,
    RolloutReplicaRegistry,
    TokenOutput,
)
from verl.workers.rollout.utils import ensure_async_iterator

logger = logging.getLogger(__name__)

NAME = "rljob_cpu"


def server_name(replica_rank: int) -> str:
    return f"{NAME}_server_{replica_rank}"


def request_seed(base_seed: int, global_steps: int | None, request_id: str) -> int:
    """The sampling seed of one request: a function of (seed, weights' step, request id) only."""
    digest = hashlib.sha256(f"{base_seed}/{global_steps}/{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _stop_ids(model_config: HFModelConfig) -> set[int]:
    ids: set[int] = set()
    for source in (model_config.hf_config, model_config.generation_config, model_config.tokenizer):
        eos = getattr(source, "eos_token_id", None) if source is not None else None
        if eos is None:
            continue
        ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
    return ids


def _filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k is not None and 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop = (
            cumulative - torch.softmax(sorted_logits, dim=-1) > top_p
        )  # keeps the token crossing top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


class CPURolloutServer:
    """One replica's inference server: a Hugging Face causal LM on the CPU."""

    def __init__(
        self, config: RolloutConfig, model_config, replica_rank: int, rollout_mode: RolloutMode
    ):
        from transformers import AutoModelForCausalLM

        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = omega_conf_to_dataclass(
            model_config, dataclass_type=HFModelConfig
        )
        self.replica_rank = replica_rank
        self.rollout_mode = rollout_mode
        self.global_steps: int | None = None
        self.stop_ids = _stop_ids(self.model_config)
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path,
            dtype=torch.float32,
            attn_implementation="eager",
            trust_remote_code=self.model_config.trust_remote_code,
        ).eval()
        self._lock = threading.Lock()  # requests and weight loads one at a time
        self._warned_uuid = False
        self._address = (
            f"{NAME}-{ray.util.get_node_ip_address().strip('[]')}-replica-{replica_rank}"
        )

    def get_server_address(self) -> str:
        return self._address

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: list[Any] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data or video_data or audio_data:
            raise NotImplementedError(f"{NAME} rollout: text only")
        if not self.config.full_determinism and not self._warned_uuid:
            self._warned_uuid = True
            logger.warning(
                f"{NAME} rollout: full_determinism off, request ids are random: runs won't repeat"
            )
        global_steps = self.global_steps
        tokens, log_probs = await asyncio.to_thread(
            self._sample,
            list(prompt_ids),
            dict(sampling_params),
            request_seed(self.config.seed, global_steps, request_id),
        )
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": global_steps},
        )

    @torch.no_grad()
    def _sample(
        self, prompt_ids: list[int], params: dict[str, Any], seed: int
    ) -> tuple[list[int], list[float]]:
        max_tokens = min(
            self.config.response_length,
            self.config.prompt_length + self.config.response_length - len(prompt_ids),
        )
        if params.get("max_tokens") is not None:
            max_tokens = min(max_tokens, int(params["max_tokens"]))
        temperature = float(params.get("temperature", 1.0))
        top_k = int(params.get("top_k", -1))
        top_p = float(params.get("top_p", 1.0))
        penalty = float(params.get("repetition_penalty", 1.0))
        generator = torch.Generator(device="cpu").manual_seed(seed)
        tokens: list[int] = []
        log_probs: list[float] = []
        with self._lock:
            inputs = torch.tensor([prompt_ids], dtype=torch.long)
            past = None
            for _ in range(max(0, max_tokens)):
                out = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                if penalty != 1.0:
                    seen = torch.tensor(sorted(set(prompt_ids + tokens)), dtype=torch.long)
                    picked = logits[seen]
                    logits[seen] = torch.where(picked > 0, picked / penalty, picked * penalty)
                if temperature <= 0:
                    token = int(torch.argmax(logits))
                    log_prob = torch.log_softmax(logits, dim=-1)[token]
                else:
                    scaled = logits / temperature
                    probs = torch.softmax(_filter_top_k_top_p(scaled, top_k, top_p), dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                    log_prob = torch.log_softmax(scaled, dim=-1)[token]
                tokens.append(token)
                log_probs.append(float(log_prob))
                if token in self.stop_ids:
                    break
                inputs = torch.tensor([[token]], dtype=torch.long)
        return tokens, log_probs

    def load_weights(self, state: dict[str, torch.Tensor]) -> int:
        """Copy the trainer's full tensors into the model; every parameter must be named."""
        with self._lock, torch.no_grad():
            own = self.model.state_dict()
            unknown = sorted(set(state) - set(own))
            missing = sorted(set(own) - set(state))
            if unknown or missing:
                raise KeyError(
                    f"{NAME} rollout: weight names: unknown {unknown[:5]}, missing {missing[:5]}"
                )
            for name, tensor in state.items():
                own[name].copy_(tensor.to(own[name].dtype))
        return len(state)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # No device memory, no engine queue: these are no-ops on the CPU.
    async def wake_up(self, **kwargs) -> None:
        pass

    async def sleep(self, **kwargs) -> None:
        pass

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        pass

    async def resume_generation(self) -> None:
        pass

    async def clear_kv_cache(self) -> None:
        pass

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def start_profile(self, **kwargs) -> None:
        pass

    async def stop_profile(self) -> None:
        pass


class CPURolloutReplica(RolloutReplica):
    """One server actor per replica, on the node of the replica's first worker."""

    async def launch_servers(self):
        node_ids = await asyncio.gather(
            *[
                worker.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
                for worker in self.workers
            ]
        )
        if self.is_reward_model or self.is_teacher_model:
            raise NotImplementedError(f"{NAME} rollout: policy rollout only")
        env_vars = {var: "1" for var in get_platform().ray_noset_envvars() or []}
        env_vars.update(get_platform().rollout_env_vars())
        env_vars["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
        server = (
            ray.remote(CPURolloutServer)
            .options(
                name=server_name(self.replica_rank),
                num_cpus=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_ids[0], soft=False),
                runtime_env={"env_vars": env_vars},
                max_concurrency=self.max_concurrency,
            )
            .remote(
                config=self.config,
                model_config=self.model_config,
                replica_rank=self.replica_rank,
                rollout_mode=self.rollout_mode,
            )
        )
        self.servers.append(server)
        self._server_handle = server
        self._server_address = await server.get_server_address.remote()


class ServerAdapter(BaseRollout):
    """The rollout in the hybrid actor-rollout worker: forwards weights to its replica's server."""

    def __init__(
        self,
        config: RolloutConfig,
        model_config: HFModelConfig,
        device_mesh=None,
        replica_rank: int = -1,
    ):
        super().__init__(config, model_config, device_mesh)
        world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = int(os.environ["RANK"])
        self.replica_rank = rank // world_size if replica_rank == -1 else replica_rank
        self.is_leader_rank = rank % world_size == 0
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]):
        pass  # weights and KV cache never leave the CPU

    async def release(self):
        pass

    async def update_weights(
        self,
        weights,
        global_steps: int | None = None,
        wire_format: str = "named_tensors",
        **kwargs,
    ):
        if wire_format != "named_tensors":
            raise NotImplementedError(
                f"{NAME} rollout takes full named tensors, not {wire_format!r}"
            )
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError(f"{NAME} rollout: LoRA adapters are not supported")
        # Every rank drains the stream: producing it runs collectives (FSDP full_tensor).
        state = {}
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_leader_rank:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_leader_rank:
            server = self._server_handle()
            await server.load_weights.remote(state)
            if global_steps is not None:
                await server.set_global_steps.remote(global_steps)


def register() -> None:
    RolloutReplicaRegistry.register(NAME, lambda: CPURolloutReplica)
    _ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.ServerAdapter"
