"""Multi-digit addition and multiplication, with a compact and a worked solution format.

Addition (``get_task("addition", digits=3, worked=..., reverse=...)``)
    prompt   ``"123+989="``
    compact  ``"1112"``                 (solution == answer)
    worked   ``"12,11,11#1112"``        column sums, least significant column first: each is
             ``a_i + b_i + carry_in`` (so its last digit is the answer digit and its tens digit the
             carry out), one per column of the longer operand; then ``#`` and the answer.
    ``reverse=True`` writes the answer least-significant digit first (``"2111"``), which a small
    causal model learns much faster; the reward then expects the reversed string.

Multiplication (``get_task("multiplication", digits=3, digits_b=2, worked=...)``)
    prompt   ``"123*45="``
    compact  ``"5535"``
    worked   ``"615+4920#5535"``        partial products ``a * b_i * 10**i``, one per digit ``b_i``
             of ``b``, least significant first, joined by ``+``; then ``#`` and the product.

Operands are drawn by first drawing a digit count uniformly from ``[min_digits, digits]`` and
then a number with exactly that many digits uniformly (one-digit numbers include 0).
Answers are canonical decimal (no leading zeros, no sign); the reward is exact match of the text
after the last ``#`` of the completion (or the whole completion).
Both operations commute, so the held-out split's key is the operand pair in ascending order:
``12+34=`` and ``34+12=`` are held out together or trained on together.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from trace_jax.tasks.base import Example, Task, register_task

_DIGITS_RE = re.compile(r"[0-9]+")


def sample_number(rng: np.random.Generator, min_digits: int, max_digits: int) -> int:
    d = int(rng.integers(min_digits, max_digits + 1))
    lo = 0 if d == 1 else 10 ** (d - 1)
    return int(rng.integers(lo, 10**d))


def _check_digits(name: str, min_digits: int, digits: int) -> None:
    if not 1 <= min_digits <= digits <= 18:
        raise ValueError(
            f"{name}: need 1 <= min_digits <= digits <= 18, got {min_digits}, {digits}"
        )


def _render(answer: str, reverse: bool) -> str:
    return answer[::-1] if reverse else answer


def _commutative_key(prompt: str, op: str) -> str:
    """``"34+12="`` -> ``"12+34"``: the operands in ascending numeric order."""
    a, b = prompt.rstrip("=").split(op)
    return op.join(sorted((a, b), key=int))


@dataclasses.dataclass
class Addition(Task):
    """``a+b=`` with operands of ``min_digits..digits`` digits. See the module docstring."""

    digits: int = 2
    min_digits: int = 1
    worked: bool = False
    reverse: bool = False
    format_reward: float = 0.0
    name: str = "addition"

    def __post_init__(self):
        _check_digits(self.name, self.min_digits, self.digits)
        d = self.digits
        self.max_prompt_len = 2 * d + 2
        self.max_solution_len = 4 * d + 1 if self.worked else d + 1

    def make(self, a: int, b: int) -> Example:
        answer = _render(str(a + b), self.reverse)
        solution = answer
        if self.worked:
            # Column sums, least significant first.
            da, db = str(a)[::-1], str(b)[::-1]
            sums, carry = [], 0
            for i in range(max(len(da), len(db))):
                s = int(da[i] if i < len(da) else 0) + int(db[i] if i < len(db) else 0) + carry
                sums.append(str(s))
                carry = s // 10
            solution = ",".join(sums) + "#" + answer
        return Example(prompt=f"{a}+{b}=", answer=answer, solution=solution)

    def sample(self, rng, n):
        return [
            self.make(
                sample_number(rng, self.min_digits, self.digits),
                sample_number(rng, self.min_digits, self.digits),
            )
            for _ in range(n)
        ]

    def is_well_formed(self, answer: str) -> bool:
        return _DIGITS_RE.fullmatch(answer) is not None

    def split_key(self, example: Example) -> str:
        return _commutative_key(example.prompt, "+")


@dataclasses.dataclass
class Multiplication(Task):
    """``a*b=``, ``a`` of ``min_digits..digits`` digits, ``b`` of ``min_digits..digits_b``."""

    digits: int = 2
    digits_b: int | None = None  # None: same as digits
    min_digits: int = 1
    worked: bool = False
    reverse: bool = False
    format_reward: float = 0.0
    name: str = "multiplication"

    def __post_init__(self):
        if self.digits_b is None:
            self.digits_b = self.digits
        _check_digits(self.name, self.min_digits, self.digits)
        _check_digits(self.name, self.min_digits, self.digits_b)
        da, db = self.digits, self.digits_b
        self.max_prompt_len = da + db + 2
        self.max_solution_len = da + db
        if self.worked:
            partials = db * (da + 1) + db * (db - 1) // 2 + (db - 1)
            self.max_solution_len = partials + 1 + da + db

    def make(self, a: int, b: int) -> Example:
        answer = _render(str(a * b), self.reverse)
        solution = answer
        if self.worked:
            partials = [str(a * int(c) * 10**i) for i, c in enumerate(str(b)[::-1])]
            solution = "+".join(partials) + "#" + answer
        return Example(prompt=f"{a}*{b}=", answer=answer, solution=solution)

    def sample(self, rng, n):
        return [
            self.make(
                sample_number(rng, self.min_digits, self.digits),
                sample_number(rng, self.min_digits, self.digits_b),
            )
            for _ in range(n)
        ]

    def is_well_formed(self, answer: str) -> bool:
        return _DIGITS_RE.fullmatch(answer) is not None

    def split_key(self, example: Example) -> str:
        return _commutative_key(example.prompt, "*")


register_task("addition", Addition)
register_task("multiplication", Multiplication)
