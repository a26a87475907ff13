"""The addition task, its tokenizer and its reward."""

from __future__ import annotations

import pytest
from rljob_trainer.task import BOS, EOS, PAD, AdditionTask, CharTokenizer

TOK = CharTokenizer()


def test_tokenizer_round_trip() -> None:
    ids = TOK.encode("07+35=")
    assert min(ids) >= 3 and TOK.vocab_size == 15
    assert TOK.decode([BOS, *ids, EOS, *TOK.encode("9")]) == "07+35="
    with pytest.raises(ValueError, match="'x' is not in the alphabet"):
        TOK.encode("x")


def test_prompts_are_zero_padded_to_one_length() -> None:
    task = AdditionTask(max_operand=12)
    assert task.num_examples == 169
    assert task.prompt(0) == "00+00="
    assert task.prompt(task.num_examples - 1) == "12+12="
    assert task.answer(13 * 3 + 4) == "7"
    assert {len(task.prompt(i)) for i in range(task.num_examples)} == {task.prompt_tokens - 1}
    assert task.max_answer_tokens == 3  # "24" + EOS
    with pytest.raises(IndexError):
        task.operands(169)


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("7.", 1.0),  # "." stands for EOS
        ("07.", 0.1),  # digits, not the answer
        ("8.", 0.1),
        ("7", 0.0),  # never ended
        (".", 0.0),  # empty answer
        ("+7.", 0.0),
        ("7=.", 0.0),
    ],
)
def test_reward(completion: str, reward: float) -> None:
    ids = [EOS if ch == "." else TOK.encode(ch)[0] for ch in completion]
    assert AdditionTask(4, format_reward=0.1).reward(ids, "7", TOK) == reward


def test_reward_ignores_what_follows_eos_and_rejects_special_tokens() -> None:
    task = AdditionTask(4)
    seven = TOK.encode("7")
    assert task.reward([*seven, EOS, PAD, PAD], "7", TOK) == 1.0
    assert task.reward([BOS, *seven, EOS], "7", TOK) == 0.0
