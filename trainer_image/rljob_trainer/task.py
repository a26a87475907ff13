"""The task: add two zero-padded numbers, `07+05=` -> `12`, scored by a programmatic reward.

A tiny model learns it on a CPU: first the format (digits, then end-of-sequence), then sums.
Zero-padding keeps every prompt the same length, so a batch needs no padding or masks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
ALPHABET = "0123456789+="


class CharTokenizer:
    """One token per character of ALPHABET, after the three special tokens."""

    def __init__(self, alphabet: str = ALPHABET) -> None:
        self.alphabet = alphabet
        self._ids = {ch: i + len(SPECIAL_TOKENS) for i, ch in enumerate(alphabet)}

    @property
    def vocab_size(self) -> int:
        return len(SPECIAL_TOKENS) + len(self.alphabet)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._ids[ch] for ch in text]
        except KeyError as exc:
            raise ValueError(f"character {exc.args[0]!r} is not in the alphabet") from None

    def decode(self, ids: Sequence[int]) -> str:
        """Characters up to the first end-of-sequence; special tokens are dropped."""
        out = []
        for i in ids:
            if i == EOS:
                break
            if i >= len(SPECIAL_TOKENS):
                out.append(self.alphabet[i - len(SPECIAL_TOKENS)])
        return "".join(out)

    def describe(self) -> dict[str, object]:
        return {"special_tokens": list(SPECIAL_TOKENS), "alphabet": self.alphabet}


@dataclass(frozen=True)
class AdditionTask:
    """All pairs (a, b) with 0 <= a, b <= max_operand, indexed 0..num_examples-1."""

    max_operand: int
    format_reward: float = 0.1

    @property
    def width(self) -> int:
        return len(str(self.max_operand))

    @property
    def num_examples(self) -> int:
        return (self.max_operand + 1) ** 2

    @property
    def prompt_tokens(self) -> int:
        """BOS + `a+b=` with both operands padded to `width` digits."""
        return 1 + 2 * self.width + 2

    @property
    def max_answer_tokens(self) -> int:
        """Digits of the largest sum plus end-of-sequence."""
        return len(str(2 * self.max_operand)) + 1

    def operands(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.num_examples:
            raise IndexError(f"example {index} out of range 0..{self.num_examples - 1}")
        return divmod(index, self.max_operand + 1)

    def prompt(self, index: int) -> str:
        a, b = self.operands(index)
        return f"{a:0{self.width}d}+{b:0{self.width}d}="

    def answer(self, index: int) -> str:
        a, b = self.operands(index)
        return str(a + b)

    def reward(self, completion: Sequence[int], answer: str, tokenizer: CharTokenizer) -> float:
        """1 for the exact answer then EOS; format_reward for other digits then EOS; else 0."""
        completion = list(completion)
        if EOS not in completion:
            return 0.0
        body = completion[: completion.index(EOS)]
        if any(t < len(SPECIAL_TOKENS) for t in body):
            return 0.0
        text = tokenizer.decode(body)
        if text == answer:
            return 1.0
        return self.format_reward if text.isdigit() else 0.0
