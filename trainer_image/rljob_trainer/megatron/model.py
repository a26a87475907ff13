"""megatron-core's parallel state and GPTModel, built from the trainer's model config.

The vocabulary is padded to a multiple of `VOCAB_MULTIPLE` whatever the tensor-parallel size,
so that a checkpoint's embedding has one shape for every TP size it may be resumed with;
the padded logits are masked out wherever probabilities are taken.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core import parallel_state, tensor_parallel
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig

from rljob_trainer.config import MegatronConfig, ModelConfig
from rljob_trainer.megatron.shape import ParallelShape

VOCAB_MULTIPLE = 128
_NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}


def init_parallel(cfg: MegatronConfig, seed: int, on_cpu: bool) -> ParallelShape:
    """Split the ranks into tensor, pipeline and data-parallel groups; seed megatron's trackers."""
    world = dist.get_world_size()
    model_parallel = cfg.tensor_model_parallel_size * cfg.pipeline_model_parallel_size
    if world % model_parallel:
        raise ValueError(
            f"{world} ranks cannot be split into tensor x pipeline parallel groups of "
            f"{cfg.tensor_model_parallel_size} x {cfg.pipeline_model_parallel_size}"
        )
    if on_cpu:
        from rljob_trainer.megatron import cpu_shim

        cpu_shim.install()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=cfg.tensor_model_parallel_size,
        pipeline_model_parallel_size=cfg.pipeline_model_parallel_size,
    )
    tensor_parallel.model_parallel_cuda_manual_seed(seed)
    return ParallelShape(
        cfg.tensor_model_parallel_size,
        cfg.pipeline_model_parallel_size,
        parallel_state.get_data_parallel_world_size(),
    )


def padded_vocab_size(vocab_size: int) -> int:
    return -(-vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def transformer_config(model: ModelConfig) -> TransformerConfig:
    """A plain fp32 GPT: no dropout, no fused kernels (they need CUDA extensions)."""
    return TransformerConfig(
        num_layers=model.n_layers,
        hidden_size=model.d_model,
        num_attention_heads=model.n_heads,
        ffn_hidden_size=model.d_ff,
        normalization=_NORMS[model.norm],
        init_method_std=model.init_std,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        tensor_model_parallel_size=parallel_state.get_tensor_model_parallel_world_size(),
        pipeline_model_parallel_size=parallel_state.get_pipeline_model_parallel_world_size(),
        pipeline_dtype=torch.float32,
        # Initialise the full weights on the CPU, then split them: every TP/PP split of the
        # same seed holds the same model.
        use_cpu_initialization=True,
        gradient_accumulation_fusion=False,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        deterministic_mode=True,
    )


def build_gpt(
    model: ModelConfig, vocab_size: int, config: TransformerConfig, seed: int, device: torch.device
) -> GPTModel:
    """This rank's part of the GPT; the same seed gives the same full model for every split."""
    torch.manual_seed(seed)
    gpt = GPTModel(
        config,
        get_gpt_layer_local_spec(normalization=_NORMS[model.norm]),
        vocab_size=padded_vocab_size(vocab_size),
        max_sequence_length=model.max_seq_len,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=model.tie_embeddings,
        position_embedding_type="learned_absolute",
    )
    return gpt.to(device)
