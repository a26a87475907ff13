"""Build checkpoint folders of every layout on disk, whole or torn in a named way.

Nothing binary is committed: `.pt` files are real zip archives written with `zipfile`
(as torch.save writes them, end records last, so cutting one short is a real
truncation), `.metadata` is a real pickle shaped like torch's DCP metadata (dataclass
`_StorageInfo(relative_path, offset, length)` entries), safetensors files have a real
header. Each `build_*` function takes the directory that holds the `global_step_N`
folders, the step, and a tear (None for a whole checkpoint); it returns the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rljob_contract.manifest import MANIFEST_NAME, write_manifest
from rljob_contract.progress import PROGRESS_FILE_NAME
from rljob_operator.checkpoints import Status

WORLD = 2  # ranks in every built checkpoint


@dataclass
class _StorageInfo:  # the name and fields torch.distributed.checkpoint.filesystem uses
    relative_path: str
    offset: int
    length: int


@dataclass
class _Metadata:
    state_dict_metadata: dict = field(default_factory=dict)
    storage_data: dict = field(default_factory=dict)


def payload(tag: str, size: int = 300) -> bytes:
    """Deterministic bytes that differ per tag."""
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def write_pt(path: Path, tag: str = "pt", size: int = 300) -> Path:
    """A torch.save-like zip archive."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload(tag + "pkl", 40))
        archive.writestr("archive/data/0", payload(tag, size))
        archive.writestr("archive/version", b"3\n")
    return path


def rewrite_as_zip64(path: Path) -> None:
    """Re-end a zip with zip64 records, as torch.save always ends its archives."""
    data = path.read_bytes()
    eocd = data.rfind(b"PK\x05\x06")
    _, _, _, entries, _, cd_size, cd_offset, _ = struct.unpack_from("<4s4H2LH", data, eocd)
    body = data[: cd_offset + cd_size]
    record = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, cd_size, cd_offset
    )
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, len(body), 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, cd_size, cd_offset, 0)
    path.write_bytes(body + record + locator + end)


def write_safetensors(path: Path, tensors: int = 2, size: int = 64) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        f"w{i}": {"dtype": "U8", "shape": [size], "data_offsets": [i * size, (i + 1) * size]}
        for i in range(tensors)
    }
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + payload(str(path), tensors * size))
    return path


def write_dcp(folder: Path, ranks: int = WORLD, items: int = 2, size: int = 100) -> Path:
    """Shards `__R_0.distcp` for every rank, then `.metadata` naming their byte ranges."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = _Metadata()
    for rank in range(ranks):
        name = f"__{rank}_0.distcp"
        (folder / name).write_bytes(payload(f"{folder}{rank}", items * size))
        for item in range(items):
            meta.storage_data[(f"w{item}", rank)] = _StorageInfo(name, item * size, size)
    (folder / ".metadata").write_bytes(pickle.dumps(meta, protocol=4))
    return folder


def write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def truncate(path: Path, keep: float = 0.6) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def flip_byte(path: Path, at: int = 200) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def _tear(folder: Path, tear: str | None, tears: dict[str, Callable[[Path], None]]) -> Path:
    if tear is not None:
        tears[tear](folder)
    return folder


# --- rljob --------------------------------------------------------------------------

RLJOB_TEARS: dict[str, Callable[[Path], None]] = {
    "no_manifest": lambda f: remove(f / MANIFEST_NAME),
    "manifest_tmp_only": lambda f: (f / MANIFEST_NAME).rename(f / (MANIFEST_NAME + ".tmp")),
    "malformed_manifest": lambda f: write_text(f / MANIFEST_NAME, '{"step": '),
    "size_mismatch": lambda f: (f / "data/data.pt").write_bytes(b"x" * 10),
    "checksum_mismatch": lambda f: flip_byte(f / "data/data.pt"),
    "listed_file_missing": lambda f: remove(f / "actor/model/config.json"),
}


def build_rljob(root: Path, step: int, tear: str | None = None) -> Path:
    folder = root / f"global_step_{step}"
    write_dcp(folder / "actor")
    write_text(folder / "actor/model/config.json", '{"model_type": "tiny"}')
    write_safetensors(folder / "actor/model/model.safetensors")
    write_pt(folder / "data/data.pt", f"data{step}")
    if tear == "wrong_step":
        write_manifest(folder, step + 1, WORLD)
        return folder
    write_manifest(folder, step, WORLD)
    return _tear(folder, tear, RLJOB_TEARS)


# --- plain DCP ----------------------------------------------------------------------

DCP_TEARS: dict[str, Callable[[Path], None]] = {
    "no_metadata": lambda f: remove(f / ".metadata"),
    "metadata_tmp_left": lambda f: (f / ".metadata").rename(f / ".metadata.tmp"),
    "metadata_tmp_beside": lambda f: write_text(f / ".metadata.tmp", "x"),
    "empty_metadata": lambda f: (f / ".metadata").write_bytes(b""),
    "truncated_metadata": lambda f: truncate(f / ".metadata"),
    "truncated_shard": lambda f: truncate(f / "__1_0.distcp"),
    "missing_shard": lambda f: remove(f / "__1_0.distcp"),
}


def build_dcp(root: Path, step: int, tear: str | None = None) -> Path:
    return _tear(write_dcp(root / f"global_step_{step}"), tear, DCP_TEARS)


# --- RLinf FSDP ---------------------------------------------------------------------

RLINF_FSDP_TEARS: dict[str, Callable[[Path], None]] = {
    "no_metadata": lambda f: remove(f / "actor/dcp_checkpoint/.metadata"),
    "metadata_tmp_left": lambda f: (f / "actor/dcp_checkpoint/.metadata").rename(
        f / "actor/dcp_checkpoint/.metadata.tmp"
    ),
    "data_dir_without_data_pt": lambda f: remove(f / "data/data.pt"),
    "empty_data_pt": lambda f: (f / "data/data.pt").write_bytes(b""),
    "truncated_data_pt": lambda f: truncate(f / "data/data.pt"),
    "truncated_full_weights": lambda f: truncate(f / "actor/model_state_dict/full_weights.pt"),
    "critic_torn": lambda f: remove(f / "critic/dcp_checkpoint/.metadata"),
}


def build_rlinf_fsdp(root: Path, step: int, tear: str | None = None) -> Path:
    folder = root / f"global_step_{step}"
    for role in ("actor", "critic"):
        write_dcp(folder / role / "dcp_checkpoint")
    write_pt(folder / "actor/model_state_dict/full_weights.pt", f"weights{step}")
    write_pt(folder / "data/data.pt", f"data{step}")
    return _tear(folder, tear, RLINF_FSDP_TEARS)


OLD_RLINF_FSDP_TEARS: dict[str, Callable[[Path], None]] = {
    "no_metadata": lambda f: remove(f / "actor/.metadata"),
    "safetensors_shard_missing": lambda f: remove(
        f / "actor/model/model-00002-of-00002.safetensors"
    ),
    "truncated_safetensors": lambda f: truncate(f / "actor/model/model-00001-of-00002.safetensors"),
}


def build_old_rlinf_fsdp(root: Path, step: int, tear: str | None = None) -> Path:
    """RLinf FSDP late 2025: DCP straight in actor/, full weights as safetensors in model/."""
    folder = root / f"global_step_{step}"
    write_dcp(folder / "actor")
    shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    for shard in shards:
        write_safetensors(folder / "actor/model" / shard)
    index = {"metadata": {"total_size": 256}, "weight_map": {"w0": shards[0], "w1": shards[1]}}
    write_text(folder / "actor/model/model.safetensors.index.json", json.dumps(index))
    write_pt(folder / "data/data.pt", f"data{step}")
    return _tear(folder, tear, OLD_RLINF_FSDP_TEARS)


# --- RLinf Megatron -----------------------------------------------------------------


def _iteration(folder: Path) -> Path:
    return next((folder / "actor").glob("iter_*"))


RLINF_MEGATRON_TEARS: dict[str, Callable[[Path], None]] = {
    "no_tracker": lambda f: remove(f / "actor/latest_checkpointed_iteration.txt"),
    "tracker_other_step": lambda f: write_text(  # another step than the folder's, whatever it is
        f / "actor/latest_checkpointed_iteration.txt", str(int(f.name.rsplit("_", 1)[1]) + 7)
    ),
    "missing_mp_rank": lambda f: remove(_iteration(f) / "mp_rank_00_001"),
    "missing_distrib_optim": lambda f: remove(_iteration(f) / "mp_rank_01_000/distrib_optim.pt"),
    "empty_model_file": lambda f: (_iteration(f) / "mp_rank_01_001/model_optim_rng.pt").write_bytes(
        b""
    ),
    "truncated_model_file": lambda f: truncate(_iteration(f) / "mp_rank_01_001/model_optim_rng.pt"),
    "no_iteration_folder": lambda f: remove(_iteration(f)),
}


def build_rlinf_megatron(root: Path, step: int, tear: str | None = None) -> Path:
    folder = root / f"global_step_{step}"
    iteration = folder / "actor" / f"iter_{step:07d}"
    for tp in range(2):
        for pp in range(2):
            for name in ("model_optim_rng.pt", "distrib_optim.pt"):
                write_pt(iteration / f"mp_rank_{tp:02d}_{pp:03d}" / name, f"{name}{tp}{pp}")
    write_text(folder / "actor/latest_checkpointed_iteration.txt", str(step))
    write_pt(folder / "data/data.pt", f"data{step}")
    return _tear(folder, tear, RLINF_MEGATRON_TEARS)


# --- verl FSDP ----------------------------------------------------------------------

VERL_FSDP_TEARS: dict[str, Callable[[Path], None]] = {
    "only_data_pt_left": lambda f: remove(f / "actor"),
    "missing_rank_shard": lambda f: remove(f / "actor/optim_world_size_2_rank_1.pt"),
    "missing_model_shard": lambda f: remove(f / "actor/model_world_size_2_rank_0.pt"),
    "no_data_pt": lambda f: remove(f / "data.pt"),
    "truncated_shard": lambda f: truncate(f / "actor/model_world_size_2_rank_1.pt"),
    "truncated_data_pt": lambda f: truncate(f / "data.pt"),
    "fsdp_config_half_written": lambda f: write_text(f / "actor/fsdp_config.json", '{"FSDP_v'),
}


def build_verl_fsdp(root: Path, step: int, tear: str | None = None) -> Path:
    folder = root / f"global_step_{step}"
    actor = folder / "actor"
    for kind in ("model", "optim", "extra_state"):
        for rank in range(WORLD):
            write_pt(actor / f"{kind}_world_size_{WORLD}_rank_{rank}.pt", f"{kind}{rank}{step}")
    write_text(actor / "fsdp_config.json", json.dumps({"FSDP_version": 2, "world_size": WORLD}))
    write_text(actor / "huggingface/config.json", "{}")
    write_pt(folder / "data.pt", f"data{step}")
    return _tear(folder, tear, VERL_FSDP_TEARS)


def write_tracker(root: Path, step: int) -> None:
    """verl's run-wide tracker, in the directory that holds the global_step_N folders."""
    write_text(root / "latest_checkpointed_iteration.txt", str(step))


# --- verl Megatron ------------------------------------------------------------------


def write_dist_ckpt(folder: Path) -> None:
    """megatron.core.dist_checkpointing with the torch_dist backend."""
    write_dcp(folder)
    write_pt(folder / "common.pt", "common")
    write_text(folder / "metadata.json", json.dumps({"sharded_backend": "torch_dist"}))


VERL_MEGATRON_TEARS: dict[str, Callable[[Path], None]] = {
    "no_ckpt_contents": lambda f: remove(f / "actor/ckpt_contents.json"),
    "contents_target_missing": lambda f: remove(f / "actor/optimizer/dist_ckpt"),
    "contents_for_other_step": lambda f: write_text(  # another step than the folder's
        f / "actor/ckpt_contents.json",
        json.dumps({"global_step": int(f.name.rsplit("_", 1)[1]) + 7, "contents": {"a": {}}}),
    ),
    "truncated_common_pt": lambda f: truncate(f / "actor/model/dist_ckpt/common.pt"),
    "no_data_pt": lambda f: remove(f / "data.pt"),
}


def build_verl_megatron(root: Path, step: int, tear: str | None = None) -> Path:
    """The v2 layout: model/, optimizer/, extra/ and ckpt_contents.json written last."""
    folder = root / f"global_step_{step}"
    actor = folder / "actor"
    contents = {}
    for part in ("model", "optimizer", "extra"):
        write_dist_ckpt(actor / part / "dist_ckpt")
        contents[part] = {"path": f"{part}/dist_ckpt", "format": "megatron_dist_checkpoint"}
    write_text(actor / "transformer_config.json", "{}")
    contents["transformer_config"] = {"path": "transformer_config.json", "format": "json"}
    write_text(actor / "model/huggingface/config.json", "{}")
    contents["hf_config"] = {"path": "model/huggingface", "format": "huggingface"}
    manifest = {"schema_version": 2, "global_step": step, "world_size": WORLD, "contents": contents}
    write_text(actor / "ckpt_contents.json", json.dumps(manifest))
    write_pt(folder / "data.pt", f"data{step}")
    return _tear(folder, tear, VERL_MEGATRON_TEARS)


OLD_VERL_MEGATRON_TEARS: dict[str, Callable[[Path], None]] = {
    "no_metadata_json": lambda f: remove(f / "actor/dist_ckpt/metadata.json"),
    "metadata_json_half_written": lambda f: write_text(f / "actor/dist_ckpt/metadata.json", '{"sh'),
    "no_dcp_metadata": lambda f: remove(f / "actor/dist_ckpt/.metadata"),
}


def build_old_verl_megatron(root: Path, step: int, tear: str | None = None) -> Path:
    """Before the v2 layout: one actor/dist_ckpt/ beside actor/huggingface/."""
    folder = root / f"global_step_{step}"
    write_dist_ckpt(folder / "actor/dist_ckpt")
    write_text(folder / "actor/huggingface/config.json", "{}")
    write_pt(folder / "data.pt", f"data{step}")
    return _tear(folder, tear, OLD_VERL_MEGATRON_TEARS)


# --- rljob Megatron -----------------------------------------------------------------


def _megatron_save_after_shards(folder: Path) -> list[Path]:
    """What rljob's Megatron save writes after the shards of iter_N, in the order it does."""
    iteration = _iteration(folder)
    return [
        iteration / ".metadata",  # DCP's finish
        iteration / "metadata.json",  # Megatron's finalize
        folder / "actor/latest_checkpointed_iteration.txt",  # once every rank has saved
        folder / "data",
        folder / MANIFEST_NAME,  # rank 0's seal
    ]


def _cut_after(kept: int) -> Callable[[Path], None]:
    """A save cut short with only the first `kept` pieces after the shards written."""

    def cut(folder: Path) -> None:
        for piece in _megatron_save_after_shards(folder)[kept:]:
            remove(piece)

    return cut


RLJOB_MEGATRON_TEARS: dict[str, Callable[[Path], None]] = {
    "shards_only": _cut_after(0),
    "no_metadata_json": _cut_after(1),
    "no_tracker": _cut_after(2),
    "no_manifest": _cut_after(4),
    "truncated_shard": lambda f: truncate(_iteration(f) / "__1_0.distcp"),
    "changed_shard": lambda f: flip_byte(_iteration(f) / "__1_0.distcp", 50),
}


def build_rljob_megatron(root: Path, step: int, tear: str | None = None) -> Path:
    """rljob's trainer with backend megatron: RLinf's Megatron arrangement, then the
    manifest; the trainer's progress.json beside the folders, as after every step."""
    folder = root / f"global_step_{step}"
    write_dist_ckpt(folder / "actor" / f"iter_{step:07d}")
    write_text(folder / "actor/latest_checkpointed_iteration.txt", str(step))
    write_pt(folder / "data/data.pt", f"data{step}")
    write_manifest(folder, step, WORLD)
    write_text(root / PROGRESS_FILE_NAME, json.dumps({"step": step, "status": "running"}))
    return _tear(folder, tear, RLJOB_MEGATRON_TEARS)


# --- Hugging Face Trainer (TRL) ------------------------------------------------------

HF_TRAINER_TEARS: dict[str, Callable[[Path], None]] = {
    "no_trainer_state": lambda f: remove(f / "trainer_state.json"),
    "trainer_state_cut": lambda f: write_text(f / "trainer_state.json", '{"global_step": 4'),
    "state_of_another_step": lambda f: write_text(  # another step than the folder's
        f / "trainer_state.json", json.dumps({"global_step": int(f.name.rsplit("-", 1)[1]) + 7})
    ),
    "no_optimizer": lambda f: remove(f / "optimizer.pt"),
    "empty_scheduler": lambda f: (f / "scheduler.pt").write_bytes(b""),
    "truncated_weights": lambda f: truncate(f / "model.safetensors"),
    "truncated_optimizer": lambda f: truncate(f / "optimizer.pt"),
    "no_weights": lambda f: remove(f / "model.safetensors"),
    "jit_save_unfinished": lambda f: write_text(f / "checkpoint-is-incomplete.txt", ""),
    "no_rng_state": lambda f: [remove(r) for r in f.glob("rng_state_*.pth")],
    "rng_rank_gap": lambda f: remove(f / "rng_state_0.pth"),
    "empty_rng_state": lambda f: (f / "rng_state_1.pth").write_bytes(b""),
    "truncated_rng_state": lambda f: truncate(f / "rng_state_1.pth"),
}


def build_hf_trainer(root: Path, step: int, tear: str | None = None) -> Path:
    """`checkpoint-N` as transformers' Trainer saves it for two processes, trainer_state.json last."""
    folder = root / f"checkpoint-{step}"
    write_text(folder / "config.json", '{"model_type": "qwen2"}')
    write_safetensors(folder / "model.safetensors")
    write_pt(folder / "optimizer.pt", f"optimizer{step}")
    write_pt(folder / "scheduler.pt", f"scheduler{step}")
    for rank in range(WORLD):
        write_pt(folder / f"rng_state_{rank}.pth", f"rng{rank}")
    write_text(folder / "trainer_state.json", json.dumps({"global_step": step, "log_history": []}))
    return _tear(folder, tear, HF_TRAINER_TEARS)


HF_SHARDED_TEARS: dict[str, Callable[[Path], None]] = {
    "missing_shard": lambda f: remove(f / "model-00002-of-00002.safetensors"),
    "index_without_map": lambda f: write_text(f / "model.safetensors.index.json", "{}"),
}


def build_hf_trainer_sharded(root: Path, step: int, tear: str | None = None) -> Path:
    folder = build_hf_trainer(root, step)
    remove(folder / "model.safetensors")
    shards = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    for shard in shards:
        write_safetensors(folder / shard)
    weight_map = {"a.weight": shards[0], "b.weight": shards[1], "c.weight": shards[1]}
    write_text(folder / "model.safetensors.index.json", json.dumps({"weight_map": weight_map}))
    return _tear(folder, tear, HF_SHARDED_TEARS)


def write_deepspeed(save_dir: Path, tag: str, zero3: bool = False, tp: int = 1) -> Path:
    """DeepSpeed 0.19.6's save_checkpoint for two data-parallel ranks in bf16, each of `tp`
    tensor-parallel ranks (AutoTP): `<tag>/` and `latest` (laid out from its source)."""
    folder = save_dir / tag
    for mp in range(tp):
        if zero3:
            for rank in range(WORLD):
                write_pt(folder / f"zero_pp_rank_{rank}_mp_rank_{mp:02d}_model_states.pt",
                         f"model{rank}")  # fmt: skip
        else:
            write_pt(folder / f"mp_rank_{mp:02d}_model_states.pt", f"model{tag}")
        for rank in range(WORLD):
            write_pt(folder / f"bf16_zero_pp_rank_{rank}_mp_rank_{mp:02d}_optim_states.pt",
                     f"optim{rank}")  # fmt: skip
    write_text(save_dir / "latest", tag)
    return folder


HF_DEEPSPEED_TEARS: dict[str, Callable[[Path], None]] = {
    "latest_names_a_missing_folder": lambda f: write_text(f / "latest", "global_step99"),
    "deepspeed_rank_missing": lambda f: remove(
        f / f"global_step{_step_of(f)}" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
    ),
    "latest_names_no_folder": lambda f: write_text(f / "latest", "../elsewhere"),
    "no_trainer_state": lambda f: remove(f / "trainer_state.json"),
}


def _step_of(folder: Path) -> int:
    return int(folder.name.rsplit("-", 1)[1])


def build_hf_trainer_deepspeed(root: Path, step: int, tear: str | None = None) -> Path:
    """`checkpoint-N` of a Trainer run under DeepSpeed ZeRO-3 (weights not gathered): no
    model file, no optimizer.pt, DeepSpeed's own folder and `latest`, trainer_state.json last
    (laid out from transformers 5.10's _save_checkpoint)."""
    folder = root / f"checkpoint-{step}"
    write_text(folder / "config.json", '{"model_type": "qwen2"}')
    write_deepspeed(folder, f"global_step{step}", zero3=True)
    write_pt(folder / "scheduler.pt", f"scheduler{step}")
    for rank in range(WORLD):
        write_pt(folder / f"rng_state_{rank}.pth", f"rng{rank}")
    write_text(folder / "trainer_state.json", json.dumps({"global_step": step, "log_history": []}))
    return _tear(folder, tear, HF_DEEPSPEED_TEARS)


HF_FSDP_TEARS: dict[str, Callable[[Path], None]] = {
    "optimizer_metadata_missing": lambda f: remove(f / "optimizer_0" / ".metadata"),
    "model_shard_missing": lambda f: remove(f / "pytorch_model_fsdp_0" / "__1_0.distcp"),
    "no_scheduler": lambda f: remove(f / "scheduler.pt"),
    "no_fsdp_optimizer": lambda f: remove(f / "optimizer_0"),
}


def build_hf_trainer_fsdp(root: Path, step: int, tear: str | None = None) -> Path:
    """`checkpoint-N` of a Trainer run under FSDP with a sharded state dict: accelerate's DCP
    folders for the model and the optimizer in place of optimizer.pt (laid out from
    transformers 5.10's and accelerate 1.16's source)."""
    folder = root / f"checkpoint-{step}"
    write_text(folder / "config.json", '{"model_type": "qwen2"}')
    write_dcp(folder / "pytorch_model_fsdp_0")
    write_dcp(folder / "optimizer_0")
    write_pt(folder / "scheduler.pt", f"scheduler{step}")
    for rank in range(WORLD):
        write_pt(folder / f"rng_state_{rank}.pth", f"rng{rank}")
    write_text(folder / "trainer_state.json", json.dumps({"global_step": step, "log_history": []}))
    return _tear(folder, tear, HF_FSDP_TEARS)


def build_hf_trainer_fsdp_full(root: Path, step: int, tear: str | None = None) -> Path:
    """The same with a full state dict: rank 0's pytorch_model_fsdp.bin and optimizer.bin."""
    folder = build_hf_trainer_fsdp(root, step)
    for name in ("pytorch_model_fsdp_0", "optimizer_0"):
        remove(folder / name)
    write_pt(folder / "pytorch_model_fsdp.bin", f"model{step}")
    write_pt(folder / "optimizer.bin", f"optimizer{step}")
    write_safetensors(folder / "model.safetensors")
    return _tear(folder, tear, HF_FSDP_FULL_TEARS)


HF_FSDP_FULL_TEARS: dict[str, Callable[[Path], None]] = {
    "empty_optimizer_bin": lambda f: (f / "optimizer.bin").write_bytes(b""),
    "truncated_model_bin": lambda f: truncate(f / "pytorch_model_fsdp.bin"),
}


# --- OpenRLHF (DeepSpeed) -------------------------------------------------------------
# Laid out from OpenRLHF 0.11.2's DeepspeedStrategy.save_ckpt and DeepSpeed 0.19.6's
# save_checkpoint (OpenRLHF itself does not import on a CPU-only machine): `root` is the run's
# `_actor` directory; DeepSpeed's `latest` names the folder, `metric.json` is written last.

OPENRLHF_TEARS: dict[str, Callable[[Path], None]] = {
    "no_metric": lambda f: remove(f / "metric.json"),
    "half_written_metric": lambda f: write_text(f / "metric.json", '{"metric_key": '),
    "missing_optimizer_shard": lambda f: remove(f / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"),
    "empty_optimizer_shard": lambda f: (f / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").write_bytes(b""),
    "no_model_states": lambda f: remove(f / "mp_rank_00_model_states.pt"),
    "truncated_model_states": lambda f: truncate(f / "mp_rank_00_model_states.pt"),
}  # fmt: skip


def build_openrlhf(
    root: Path, step: int, tear: str | None = None, zero3: bool = False, tp: int = 1
) -> Path:
    """`_actor/global_stepN` of two data-parallel ranks, bf16 (OpenRLHF's default)."""
    folder = write_deepspeed(root, f"global_step{step}", zero3, tp)
    write_text(folder / "metric.json", json.dumps({"metric_key": None, "metric_value": None}))
    tears = OPENRLHF_AUTOTP_TEARS if tp > 1 else OPENRLHF_ZERO3_TEARS if zero3 else OPENRLHF_TEARS
    return _tear(folder, tear, tears)


OPENRLHF_ZERO3_TEARS: dict[str, Callable[[Path], None]] = {
    "missing_model_states": lambda f: remove(f / "zero_pp_rank_1_mp_rank_00_model_states.pt"),
    "gap_in_ranks": lambda f: remove(f / "zero_pp_rank_0_mp_rank_00_model_states.pt"),
}


def build_openrlhf_zero3(root: Path, step: int, tear: str | None = None) -> Path:
    return build_openrlhf(root, step, tear, zero3=True)


OPENRLHF_AUTOTP_TEARS: dict[str, Callable[[Path], None]] = {
    "second_tp_model_states_missing": lambda f: remove(f / "mp_rank_01_model_states.pt"),
    "second_tp_optimizer_shard_missing": lambda f: remove(
        f / "bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt"
    ),
    "second_tp_optimizer_shards_missing": lambda f: [
        remove(f / f"bf16_zero_pp_rank_{rank}_mp_rank_01_optim_states.pt") for rank in range(WORLD)
    ],
    "truncated_second_tp_shard": lambda f: truncate(
        f / "bf16_zero_pp_rank_0_mp_rank_01_optim_states.pt"
    ),
}


def build_openrlhf_autotp(root: Path, step: int, tear: str | None = None) -> Path:
    """Two tensor-parallel ranks (DeepSpeed's AutoTP, `--ds.tensor_parallel_size 2`)."""
    return build_openrlhf(root, step, tear, tp=2)


BUILDERS: dict[str, tuple[Callable[[Path, int, str | None], Path], dict]] = {
    "rljob": (build_rljob, RLJOB_TEARS),
    "rljob-megatron": (build_rljob_megatron, RLJOB_MEGATRON_TEARS),
    "dcp": (build_dcp, DCP_TEARS),
    "rlinf-fsdp": (build_rlinf_fsdp, RLINF_FSDP_TEARS),
    "rlinf-fsdp-old": (build_old_rlinf_fsdp, OLD_RLINF_FSDP_TEARS),
    "rlinf-megatron": (build_rlinf_megatron, RLINF_MEGATRON_TEARS),
    "verl-fsdp": (build_verl_fsdp, VERL_FSDP_TEARS),
    "verl-megatron": (build_verl_megatron, VERL_MEGATRON_TEARS),
    "verl-megatron-old": (build_old_verl_megatron, OLD_VERL_MEGATRON_TEARS),
    "hf-trainer": (build_hf_trainer, HF_TRAINER_TEARS),
    "hf-trainer-sharded": (build_hf_trainer_sharded, HF_SHARDED_TEARS),
    "hf-trainer-deepspeed": (build_hf_trainer_deepspeed, HF_DEEPSPEED_TEARS),
    "hf-trainer-fsdp": (build_hf_trainer_fsdp, HF_FSDP_TEARS),
    "hf-trainer-fsdp-full": (build_hf_trainer_fsdp_full, HF_FSDP_FULL_TEARS),
    "openrlhf-deepspeed": (build_openrlhf, OPENRLHF_TEARS),
    "openrlhf-deepspeed-zero3": (build_openrlhf_zero3, OPENRLHF_ZERO3_TEARS),
    "openrlhf-deepspeed-autotp": (build_openrlhf_autotp, OPENRLHF_AUTOTP_TEARS),
}


# What each builder's folders are worth, for the tests that judge them.
OK, INC, BAD = Status.COMPLETE, Status.INCOMPLETE, Status.CORRUPT

# variant: (the --layout name, what auto reads a whole folder as)
VARIANTS = {
    "rljob": ("rljob", "rljob"),
    "rljob-megatron": ("rljob", "rljob"),  # auto: by the trainer's progress.json
    "dcp": ("dcp", "dcp"),
    "rlinf-fsdp": ("rlinf-fsdp", "rlinf-fsdp"),
    "rlinf-fsdp-old": ("rlinf-fsdp", "rljob"),  # indistinguishable from an unsealed rljob folder
    "rlinf-megatron": ("rlinf-megatron", "rlinf-megatron"),
    "verl-fsdp": ("verl-fsdp", "verl-fsdp"),
    "verl-megatron": ("verl-megatron", "verl-megatron"),
    "verl-megatron-old": ("verl-megatron", "verl-megatron"),
    # auto reads global_step_N folders only: a checkpoint-N folder needs its layout named
    "hf-trainer": ("hf-trainer", None),
    "hf-trainer-sharded": ("hf-trainer", None),
    "hf-trainer-deepspeed": ("hf-trainer", None),
    "hf-trainer-fsdp": ("hf-trainer", None),
    "hf-trainer-fsdp-full": ("hf-trainer", None),
    # and global_stepN (no underscore) not at all
    "openrlhf-deepspeed": ("openrlhf-deepspeed", None),
    "openrlhf-deepspeed-zero3": ("openrlhf-deepspeed", None),
    "openrlhf-deepspeed-autotp": ("openrlhf-deepspeed", None),
}

# (variant, tear): (status under quick, status under deep, words in the reason)
TORN = {
    ("rljob", "no_manifest"): (INC, INC, "no rljob_manifest.json"),
    ("rljob", "manifest_tmp_only"): (INC, INC, "still being written"),
    ("rljob", "malformed_manifest"): (BAD, BAD, "malformed"),
    ("rljob", "size_mismatch"): (BAD, BAD, "data/data.pt is 10 bytes, rljob_manifest.json says"),
    ("rljob", "checksum_mismatch"): (OK, BAD, "data/data.pt does not match its sha256"),
    ("rljob", "listed_file_missing"): (BAD, BAD, "actor/model/config.json is listed"),
    ("rljob", "wrong_step"): (BAD, BAD, "is for step"),
    ("rljob-megatron", "shards_only"): (
        INC,
        INC,
        "the save did not finish (actor/iter_0000040/.metadata is missing: DCP writes it",
    ),
    ("rljob-megatron", "no_metadata_json"): (
        INC,
        INC,
        "the save did not finish (actor/iter_0000040/metadata.json is missing: Megatron",
    ),
    ("rljob-megatron", "no_tracker"): (
        INC,
        INC,
        "rljob_manifest.json is missing: the save did not finish"
        " (actor/latest_checkpointed_iteration.txt is missing: Megatron writes it after",
    ),
    ("rljob-megatron", "no_manifest"): (
        INC,
        INC,
        "rljob_manifest.json is missing: the save did not finish"
        " (actor/iter_0000040/ whole; the manifest is written last)",
    ),
    ("rljob-megatron", "truncated_shard"): (
        BAD,
        BAD,
        "actor/iter_0000040/__1_0.distcp is 120 bytes, rljob_manifest.json says 200",
    ),
    ("rljob-megatron", "changed_shard"): (OK, BAD, "__1_0.distcp does not match its sha256"),
    ("dcp", "no_metadata"): (INC, INC, ".metadata is missing"),
    ("dcp", "metadata_tmp_left"): (INC, INC, ".metadata.tmp is present"),
    ("dcp", "metadata_tmp_beside"): (INC, INC, ".metadata.tmp is present"),
    ("dcp", "empty_metadata"): (INC, INC, ".metadata is empty"),
    ("dcp", "truncated_metadata"): (OK, BAD, ".metadata is not a whole pickle"),
    ("dcp", "truncated_shard"): (OK, BAD, "__1_0.distcp is 120 bytes, .metadata needs 200"),
    ("dcp", "missing_shard"): (OK, BAD, "__1_0.distcp is named by .metadata but missing"),
    ("rlinf-fsdp", "no_metadata"): (INC, INC, "actor/dcp_checkpoint/.metadata is missing"),
    ("rlinf-fsdp", "metadata_tmp_left"): (
        INC,
        INC,
        "actor/dcp_checkpoint/.metadata.tmp is present",
    ),
    ("rlinf-fsdp", "data_dir_without_data_pt"): (INC, INC, "data/data.pt is missing"),
    ("rlinf-fsdp", "empty_data_pt"): (INC, INC, "data/data.pt is empty"),
    ("rlinf-fsdp", "truncated_data_pt"): (OK, BAD, "data/data.pt: no zip end-of-central-directory"),
    ("rlinf-fsdp", "truncated_full_weights"): (OK, BAD, "model_state_dict/full_weights.pt: no zip"),
    ("rlinf-fsdp", "critic_torn"): (INC, INC, "critic/dcp_checkpoint/.metadata is missing"),
    ("rlinf-fsdp-old", "no_metadata"): (INC, INC, "actor/.metadata is missing"),
    ("rlinf-fsdp-old", "safetensors_shard_missing"): (
        INC,
        INC,
        "model-00002-of-00002.safetensors is",
    ),
    ("rlinf-fsdp-old", "truncated_safetensors"): (OK, BAD, "safetensors file is"),
    ("rlinf-megatron", "no_tracker"): (INC, INC, "latest_checkpointed_iteration.txt is missing"),
    ("rlinf-megatron", "tracker_other_step"): (INC, INC, "says '47', not 40"),
    ("rlinf-megatron", "missing_mp_rank"): (INC, INC, "mp_rank_00_001/ is missing"),
    ("rlinf-megatron", "missing_distrib_optim"): (
        INC,
        INC,
        "mp_rank_01_000/distrib_optim.pt is miss",
    ),
    ("rlinf-megatron", "empty_model_file"): (
        INC,
        INC,
        "mp_rank_01_001/model_optim_rng.pt is empty",
    ),
    ("rlinf-megatron", "truncated_model_file"): (OK, BAD, "model_optim_rng.pt: no zip end"),
    ("rlinf-megatron", "no_iteration_folder"): (INC, INC, "actor/iter_0000040/ is missing"),
    ("verl-fsdp", "only_data_pt_left"): (INC, INC, "only data.pt is left"),
    ("verl-fsdp", "missing_rank_shard"): (
        INC,
        INC,
        "actor/optim_world_size_2_rank_1.pt is missing",
    ),
    ("verl-fsdp", "missing_model_shard"): (
        INC,
        INC,
        "actor/model_world_size_2_rank_0.pt is missing",
    ),
    ("verl-fsdp", "no_data_pt"): (INC, INC, "data.pt is missing"),
    ("verl-fsdp", "truncated_shard"): (OK, BAD, "model_world_size_2_rank_1.pt: no zip end"),
    ("verl-fsdp", "truncated_data_pt"): (OK, BAD, "data.pt: no zip end"),
    ("verl-fsdp", "fsdp_config_half_written"): (INC, INC, "fsdp_config.json is not complete JSON"),
    ("verl-megatron", "no_ckpt_contents"): (INC, INC, "actor/ckpt_contents.json is missing"),
    ("verl-megatron", "contents_target_missing"): (
        BAD,
        BAD,
        "though actor/ckpt_contents.json lists",
    ),
    ("verl-megatron", "contents_for_other_step"): (BAD, BAD, "is for step 47"),
    ("verl-megatron", "truncated_common_pt"): (OK, BAD, "model/dist_ckpt/common.pt: no zip end"),
    ("verl-megatron", "no_data_pt"): (INC, INC, "data.pt is missing"),
    ("verl-megatron-old", "no_metadata_json"): (INC, INC, "dist_ckpt/metadata.json is missing"),
    ("verl-megatron-old", "metadata_json_half_written"): (
        INC,
        INC,
        "metadata.json is not complete",
    ),
    ("verl-megatron-old", "no_dcp_metadata"): (INC, INC, "actor/dist_ckpt/.metadata is missing"),
    ("hf-trainer", "no_trainer_state"): (
        INC,
        INC,
        "no trainer_state.json: the Trainer writes it last",
    ),
    ("hf-trainer", "trainer_state_cut"): (INC, INC, "trainer_state.json is not complete JSON yet"),
    ("hf-trainer", "state_of_another_step"): (BAD, BAD, "global_step 47, the folder's name 40"),
    ("hf-trainer", "no_optimizer"): (
        INC,
        INC,
        "optimizer.pt is missing (the Trainer writes it before",
    ),
    ("hf-trainer", "empty_scheduler"): (INC, INC, "scheduler.pt is empty"),
    ("hf-trainer", "truncated_weights"): (OK, BAD, "model.safetensors: safetensors file is"),
    ("hf-trainer", "truncated_optimizer"): (OK, BAD, "optimizer.pt:"),
    ("hf-trainer", "no_weights"): (INC, INC, "no model weights"),
    ("hf-trainer", "jit_save_unfinished"): (INC, INC, "save on SIGTERM did not finish"),
    ("hf-trainer", "no_rng_state"): (INC, INC, "no rng_state*.pth"),
    ("hf-trainer", "rng_rank_gap"): (INC, INC, "rng_state_0.pth is missing"),
    ("hf-trainer", "empty_rng_state"): (INC, INC, "rng_state_1.pth is empty"),
    ("hf-trainer", "truncated_rng_state"): (OK, BAD, "rng_state_1.pth:"),
    ("hf-trainer-sharded", "missing_shard"): (
        INC,
        INC,
        "model-00002-of-00002.safetensors is missing",
    ),
    ("hf-trainer-sharded", "index_without_map"): (BAD, BAD, "has no weight_map"),
    ("hf-trainer-deepspeed", "latest_names_a_missing_folder"): (
        INC,
        INC,
        "global_step99/ is missing: DeepSpeed's latest names it",
    ),
    ("hf-trainer-deepspeed", "deepspeed_rank_missing"): (
        INC,
        INC,
        "global_step40/: the optimizer shard of rank 0 is missing",
    ),
    ("hf-trainer-deepspeed", "latest_names_no_folder"): (BAD, BAD, "latest names '../elsewhere'"),
    ("hf-trainer-deepspeed", "no_trainer_state"): (INC, INC, "no trainer_state.json"),
    ("hf-trainer-fsdp", "optimizer_metadata_missing"): (
        INC,
        INC,
        "optimizer_0/.metadata is missing: DCP writes it after every rank's shards",
    ),
    ("hf-trainer-fsdp", "model_shard_missing"): (OK, BAD, "__1_0.distcp"),
    ("hf-trainer-fsdp", "no_scheduler"): (INC, INC, "scheduler.pt is missing"),
    ("hf-trainer-fsdp", "no_fsdp_optimizer"): (INC, INC, "optimizer.bin is missing"),
    ("hf-trainer-fsdp-full", "empty_optimizer_bin"): (INC, INC, "optimizer.bin is empty"),
    ("hf-trainer-fsdp-full", "truncated_model_bin"): (OK, BAD, "pytorch_model_fsdp.bin:"),
    ("openrlhf-deepspeed", "no_metric"): (INC, INC, "no metric.json: OpenRLHF writes it last"),
    ("openrlhf-deepspeed", "half_written_metric"): (INC, INC, "metric.json"),
    ("openrlhf-deepspeed", "missing_optimizer_shard"): (
        INC,
        INC,
        "the optimizer shard of rank 0 is missing (ranks up to 1 wrote theirs)",
    ),
    ("openrlhf-deepspeed", "empty_optimizer_shard"): (
        INC,
        INC,
        "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt is empty",
    ),
    ("openrlhf-deepspeed", "no_model_states"): (INC, INC, "mp_rank_00_model_states.pt"),
    ("openrlhf-deepspeed", "truncated_model_states"): (OK, BAD, "mp_rank_00_model_states.pt:"),
    ("openrlhf-deepspeed-zero3", "missing_model_states"): (
        INC,
        INC,
        "the model states and optimizer shards are of different ranks",
    ),
    ("openrlhf-deepspeed-zero3", "gap_in_ranks"): (
        INC,
        INC,
        "the model states file of rank 0 is missing",
    ),
    # DeepSpeed's AutoTP: every tensor-parallel rank's files, not only mp_rank_00's.
    ("openrlhf-deepspeed-autotp", "second_tp_model_states_missing"): (
        INC,
        INC,
        "mp_rank_01_model_states.pt is missing",
    ),
    ("openrlhf-deepspeed-autotp", "second_tp_optimizer_shard_missing"): (
        INC,
        INC,
        "the optimizer shard of rank 1, model-parallel rank 01, is missing",
    ),
    ("openrlhf-deepspeed-autotp", "second_tp_optimizer_shards_missing"): (
        INC,
        INC,
        "mp_rank_01_model_states.pt has no optimizer shard of its model-parallel rank",
    ),
    ("openrlhf-deepspeed-autotp", "truncated_second_tp_shard"): (
        OK,
        BAD,
        "bf16_zero_pp_rank_0_mp_rank_01_optim_states.pt:",
    ),
}


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything a read-only tool must leave alone: names, kinds, bytes, modes, mtimes."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                state[str(path)] = ("link", os.readlink(path))
            elif path.is_dir():
                state[str(path)] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                content = path.read_bytes() if os.access(path, os.R_OK) else None
                state[str(path)] = ("file", st.st_mode, st.st_mtime_ns, content)
    return state
