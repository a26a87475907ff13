"""A Megatron checkpoint's model as the state dict of the whole GPTModel on one rank.

dist_checkpointing stores every tensor whole (its shards are slices of one global tensor), and
the transformer layers stacked along a leading layer axis: `decoder.layers.<name>` of shape
[n_layers, ...]. Splitting that axis gives `decoder.layers.<i>.<name>`, and the norms get back
the names of the trainer's layers (megatron's local layer spec saves them under the names of
Transformer Engine's fused layers): the state dict of the GPTModel on one rank. No process group.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rljob_trainer.dcp_read import ConvertError, read_dcp_tensors

STACKED = "decoder.layers."
COMMON_FILE = "common.pt"


def _is_model_tensor(key: str) -> bool:
    return not key.startswith(("optimizer.", "rng_state")) and "_extra_state" not in key


def _layer_names() -> dict[str, str]:
    """A layer's checkpoint name prefix -> its own parameter prefix, as the layer spec maps it."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    keys_map = get_gpt_layer_local_spec().submodules.sharded_state_dict_keys_map
    return {saved: own for own, saved in keys_map.items()}


def _own_name(name: str, names: dict[str, str]) -> str:
    for saved, own in names.items():
        if name.startswith(saved):
            return own + name[len(saved) :]
    return name


def megatron_model(iteration: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(weights, model config) of a dist_checkpointing folder written by the trainer."""
    try:
        common = torch.load(iteration / COMMON_FILE, weights_only=True)
        config = json.loads(common["train_state"]["model_config"])
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise ConvertError(f"{iteration}/{COMMON_FILE} holds no model config: {exc}") from None
    names = _layer_names()
    weights: dict[str, torch.Tensor] = {}
    for key, tensor in read_dcp_tensors(iteration, _is_model_tensor, {}).items():
        assert isinstance(tensor, torch.Tensor)
        if key.startswith(STACKED):
            name = _own_name(key[len(STACKED) :], names)
            for layer, weight in enumerate(tensor.unbind(0)):
                weights[f"{STACKED}{layer}.{name}"] = weight.contiguous()
        else:
            weights[key] = tensor
    return weights, config
