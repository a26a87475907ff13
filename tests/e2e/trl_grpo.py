"""A tiny TRL GRPO training job, for rljob's e2e tests.

    python tests/e2e/trl_grpo.py --output_dir DIR --max_steps 8 --save_steps 4 \
        [--resume_from_checkpoint DIR/checkpoint-4] [--seed S] [--seconds_per_step 1] \
        [any other GRPOConfig / TrainingArguments flag]
    torchrun --nproc_per_node=2 tests/e2e/trl_grpo.py --output_dir DIR ...

What is real:
- TRL's own `GRPOTrainer` (trl 1.16) and its `GRPOConfig` command line, read by `TrlParser`,
  so TRL's and transformers' flags work as they do for any TRL job, `--resume_from_checkpoint`
  included (give it a checkpoint folder);
- the whole GRPO step: sampling `num_generations` completions per prompt with HF `generate`
  (no vLLM), group-normalised advantages, the clipped policy loss, AdamW;
- the checkpoints: transformers' `Trainer` writes `output_dir/checkpoint-N` every
  `save_steps` steps (weights, optimizer, scheduler, RNG state, `trainer_state.json`) and reads
  them back on `--resume_from_checkpoint`;
- distribution: under torchrun, accelerate/Trainer pick up the environment and run DDP over a
  gloo process group on CPU.

What is patched: torch.load is taught that "cpu:0" means the CPU (see `_cpu_index_deserialize`),
without which transformers cannot resume a multi-process CPU run.

What is made up:
- the model: a random tiny Qwen2 causal LM (2 layers, hidden 32) built here with a fixed
  seed, no hub, no download;
- the tokenizer: a word-level `tokenizers` vocabulary made here;
- the data: 16 fixed prompts ("what is 3 + 4 ?");
- the reward: a toy, deterministic one, the share of completion words that are "yes";
- the pace, when a test asks: `--seconds_per_step` (this script's one flag of its own, 0 by
  default) pauses at each step's start so a test can stop a run between two checkpoints; it
  changes no numbers.

Defaults differ from GRPOConfig's so a step takes a fraction of a second on one CPU thread:
CPU only, fp32, no gradient checkpointing, no DDP unused-parameter search, 4 completions of at
most 8 tokens per prompt, `report_to none`, a learning rate high enough that the weights change
every step. Flags given on the command line override them.

Resuming from a checkpoint-N written by a normal save gives bitwise the weights of an
uninterrupted run, on one process or two, as long as the resume stays in the first epoch
(16 prompts: 16 steps on one process, 8 on two) or `--shuffle_dataset false` is given (TRL's
RepeatSampler reshuffles each epoch from one generator that a restart re-seeds), and, with
`--num_iterations` > 1, N is a multiple of it (a restart regenerates completions mid-block).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer, TrlParser

TARGET = "yes"
SPECIAL = ["<pad>", "<unk>", "<eos>"]
WORDS = ["what", "is", "+", "?", "yes", "no", "maybe"] + [str(i) for i in range(10)]

DEFAULTS = dict(
    use_cpu=True,
    bf16=False,
    gradient_checkpointing=False,
    per_device_train_batch_size=4,
    num_generations=4,
    max_completion_length=8,
    learning_rate=1e-2,
    logging_steps=1,
    save_strategy="steps",
    report_to="none",
    disable_tqdm=True,
    dataloader_num_workers=0,
    ddp_find_unused_parameters=False,
)


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>"
    )


def model(tok: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )  # fmt: skip
    # The same weights whatever --seed says: the seed is the training run's, not the model's.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lm = Qwen2ForCausalLM(config)
    lm.generation_config.eos_token_id = tok.eos_token_id
    lm.generation_config.pad_token_id = tok.pad_token_id
    return lm


def dataset() -> Dataset:
    return Dataset.from_dict(
        {"prompt": [f"what is {i % 10} + {i // 10 + i % 3} ?" for i in range(16)]}
    )


def reward_yes(completions: list[str], **kwargs) -> list[float]:
    """Share of the completion's words that are TARGET."""
    rewards = []
    for text in completions:
        words = text.split()
        rewards.append(words.count(TARGET) / len(words) if words else 0.0)
    return rewards


@dataclass
class ScriptArguments:
    seconds_per_step: float = field(
        default=0.0,
        metadata={"help": "Sleep this long at each step's start, so tests can stop a run mid-way."},
    )


class SlowSteps(TrainerCallback):
    def __init__(self, seconds: float):
        self.seconds = seconds

    def on_step_begin(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def _cpu_index_deserialize(storage, location: str):
    """Let torch.load map onto "cpu:N" as onto "cpu".

    Under torchrun on CPU, accelerate makes each process's device torch.device("cpu", 0), and
    Trainer, resuming with more than one process, loads optimizer.pt with
    `map_location=args.device`; torch's own CPU deserializer accepts only "cpu", so without this
    the resume fails with "don't know how to restore data location ... (tagged with cpu:0)".
    """
    if location.startswith("cpu:"):
        return storage
    return None


def main(argv: list[str]) -> None:
    torch.serialization.register_package(9, lambda storage: None, _cpu_index_deserialize)
    parser = TrlParser((GRPOConfig, ScriptArguments))
    parser.set_defaults(**DEFAULTS)
    args, script = parser.parse_args_and_config(argv)
    resume = args.resume_from_checkpoint
    tok = tokenizer()
    trainer = GRPOTrainer(
        model=model(tok), reward_funcs=reward_yes, args=args, train_dataset=dataset(),
        processing_class=tok,
        callbacks=[SlowSteps(script.seconds_per_step)] if script.seconds_per_step > 0 else None,
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=resume)


if __name__ == "__main__":
    main(sys.argv[1:])
