"""Inputs for verl's real GRPO driver made here, with no hub: a tiny random Qwen2 model, a
word-level tokenizer with a chat template, and train/val parquet files in verl's RL format.

    python -m rljob_verl_cpu.inputs WORK_DIR [TRAIN_ROWS]   # writes WORK_DIR/model and /data
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>", "<unk>"]
# Byte-level spellings of newline and space ("Ċ", "Ġ"): transformers 5 loads a tokenizer saved
# next to a qwen2 config as its Qwen2Tokenizer, a byte-level BPE rebuilt from this vocabulary
# (no merges, so character by character), which drops symbols it cannot spell; verl's Qwen
# chat-boundary handling needs "\n" to be exactly one token.
WORDS = ["system", "user", "assistant", "Ċ", ":", "Ġ", "what", "is", "the", "answer"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    words = SPECIAL + WORDS + [str(i) for i in range(10)] + list("abcdefghijklmnopqrstuvwxyz+=?.#")
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    pattern = Regex(r"<\|[a-z_]+\|>|[a-z]+|\d|\s|.")
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=pattern, behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>", "<|endoftext|>"],
    )  # fmt: skip
    hf.chat_template = CHAT_TEMPLATE
    return hf


def model(tok: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
        tie_word_embeddings=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    lm = Qwen2ForCausalLM(config)
    lm.generation_config.eos_token_id = tok.eos_token_id
    lm.generation_config.pad_token_id = tok.pad_token_id
    return lm


def rows(count: int) -> list[dict]:
    """Addition prompts in the columns verl's RLHFDataset and its gsm8k reward read."""
    made = []
    for i in range(count):
        question = f"what is {i}+{i + 1}?"
        made.append({
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(2 * i + 1)},
            "extra_info": {"split": "train", "index": i, "answer": f"#### {2 * i + 1}",
                           "question": question},
        })  # fmt: skip
    return made


def make_inputs(work: Path, train_rows: int = 8) -> None:
    """WORK/model (tokenizer and weights) and WORK/data/{train,val}.parquet; `train_rows` /
    data.train_batch_size is the number of steps in an epoch."""
    tok = tokenizer()
    tok.save_pretrained(work / "model")
    model(tok).save_pretrained(work / "model")
    (work / "data").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows(train_rows)).to_parquet(work / "data" / "train.parquet")
    pd.DataFrame(rows(4)).to_parquet(work / "data" / "val.parquet")
    print(f"model, tokenizer ({len(tok)} tokens) and {train_rows} training rows in {work}")


if __name__ == "__main__":
    make_inputs(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:3]))
