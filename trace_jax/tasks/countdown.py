"""Countdown: reach a target from given numbers with ``+``, ``-``, ``*`` and parentheses.

``get_task("countdown", count=4, min_use=2, max_num=10, max_target=100, use_all=False, worked=...)``
    prompt    ``"3,5,7,2->22:"``        the numbers, ``->``, the target, ``:``
    compact   ``"3*5+7"``               an expression (the reference answer; any valid one scores)
    worked    ``"3*5=15,15+7=22#3*5+7"`` one ``x op y=z`` step per operation, then ``#`` and the
              expression.

Reward (``is_correct``): the answer (text after the last ``#``, or the whole completion) must
parse under the grammar ``expr := term (("+"|"-") term)*``, ``term := factor ("*" factor)*``,
``factor := NUMBER | "(" expr ")"`` (``NUMBER`` canonical decimal, no leading zeros, no unary
minus; spaces allowed between tokens), use each given number at most once (all of them exactly
once with ``use_all=True``; a number given twice may be used twice), and evaluate (integer
arithmetic) to the target. The numbers and target are read back from the prompt, so a JSONL of
countdown prompts can be scored too. Parsing never calls ``eval``. The held-out split's key is
the numbers in ascending order and the target: the same numbers in another order are the same
puzzle.

Generation: ``count`` numbers uniform in ``[1, max_num]``; a random subset of ``min_use..count``
of them (all with ``use_all``) is combined pairwise in random order with random operators
(``x-y`` only with ``x >= y``); every intermediate value stays in ``[0, max_target]``, the target
in ``[1, max_target]`` and not among the given numbers (otherwise redrawn).
"""

from __future__ import annotations

import collections
import dataclasses
import re

from trace_jax.tasks.base import Example, Task, register_task

_PROMPT_RE = re.compile(r"([0-9]+(?:,[0-9]+)*)->([0-9]+):")
_TOKEN_RE = re.compile(r"\s*(?:(0|[1-9][0-9]*)|([-+*()]))")
MAX_EXPR_LEN = 256


class ParseError(ValueError):
    pass


def parse_prompt(prompt: str) -> tuple[list[int], int]:
    """``"3,5,7,2->22:" -> ([3, 5, 7, 2], 22)``; ``ValueError`` for any other text."""
    m = _PROMPT_RE.fullmatch(prompt)
    if m is None:
        raise ValueError(f"not a countdown prompt: {prompt!r}")
    return [int(x) for x in m.group(1).split(",")], int(m.group(2))


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None or m.end() == pos:
            raise ParseError(f"unexpected character at {pos} in {text!r}")
        tokens.append(m.group(1) or m.group(2))
        pos = m.end()
    return tokens


def parse_expression(text: str) -> tuple[int, list[int]]:
    """Value and the numbers (in order) of an arithmetic expression; ``ParseError`` if malformed."""
    if len(text) > MAX_EXPR_LEN:
        raise ParseError(f"expression longer than {MAX_EXPR_LEN} characters")
    tokens = _tokenize(text)
    numbers: list[int] = []
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def factor():
        t = peek()
        if t is None:
            raise ParseError("unexpected end of expression")
        if t == "(":
            take()
            v = expr()
            if peek() != ")":
                raise ParseError("missing ')'")
            take()
            return v
        if t[0] in "0123456789":
            take()
            numbers.append(int(t))
            return int(t)
        raise ParseError(f"unexpected token {t!r}")

    def term():
        v = factor()
        while peek() == "*":
            take()
            v = v * factor()
        return v

    def expr():
        v = term()
        while peek() in ("+", "-"):
            op = take()
            w = term()
            v = v + w if op == "+" else v - w
        return v

    try:
        value = expr()
    except RecursionError:
        raise ParseError("expression nested too deeply") from None
    if pos != len(tokens):
        raise ParseError(f"unexpected token {tokens[pos]!r}")
    return value, numbers


@dataclasses.dataclass
class Countdown(Task):
    count: int = 4
    min_use: int = 2
    max_num: int = 10
    max_target: int = 100
    use_all: bool = False
    worked: bool = False
    format_reward: float = 0.0
    name: str = "countdown"

    def __post_init__(self):
        if not 2 <= self.min_use <= self.count <= 8:
            raise ValueError(
                f"countdown: need 2 <= min_use <= count <= 8, got {self.min_use}, {self.count}"
            )
        if self.max_num < 1 or self.max_target < 2:
            raise ValueError("countdown: need max_num >= 1 and max_target >= 2")
        n, ln, lt = self.count, len(str(self.max_num)), len(str(self.max_target))
        lv = max(ln, lt)
        self.max_prompt_len = n * ln + (n - 1) + 2 + lt + 1
        expr = n * ln + (n - 1) + 4 * (n - 1)  # numbers, operators, at most 2 paren pairs per op
        self.max_solution_len = expr
        if self.worked:
            self.max_solution_len = (n - 1) * (3 * lv + 2) + (n - 2) + 1 + expr

    def _draw(self, rng) -> Example | None:
        nums = [int(x) for x in rng.integers(1, self.max_num + 1, size=self.count)]
        k = self.count if self.use_all else int(rng.integers(self.min_use, self.count + 1))
        # (value, text, precedence): leaves 3, "*" 2, "+"/"-" 1.
        items = [(nums[i], str(nums[i]), 3) for i in rng.permutation(self.count)[:k]]
        steps = []
        while len(items) > 1:
            i, j = (int(x) for x in rng.choice(len(items), size=2, replace=False))
            (lv, ls, lp), (rv, rs, rp) = items[i], items[j]
            op = "+-*"[int(rng.integers(3))]
            if op == "-" and lv < rv:
                (lv, ls, lp), (rv, rs, rp) = (rv, rs, rp), (lv, ls, lp)
            prec = 2 if op == "*" else 1
            value = {"+": lv + rv, "-": lv - rv, "*": lv * rv}[op]
            if value > self.max_target:
                return None
            left = ls if lp >= prec else f"({ls})"
            right = rs if (rp >= 2 or op == "+") else f"({rs})"
            steps.append(f"{lv}{op}{rv}={value}")
            items = [it for t, it in enumerate(items) if t not in (i, j)]
            items.append((value, left + op + right, prec))
        target, expression, _ = items[0]
        if target < 1 or target in nums:
            return None
        prompt = ",".join(map(str, nums)) + f"->{target}:"
        solution = ",".join(steps) + "#" + expression if self.worked else expression
        return Example(prompt=prompt, answer=expression, solution=solution)

    def sample(self, rng, n):
        out = []
        for _ in range(n):
            for _attempt in range(10_000):
                ex = self._draw(rng)
                if ex is not None:
                    out.append(ex)
                    break
            else:
                raise ValueError(f"countdown: cannot draw puzzles with these settings: {self}")
        return out

    def is_correct(self, example: Example, answer: str) -> bool:
        nums, target = parse_prompt(example.prompt)
        try:
            value, used = parse_expression(answer)
        except ParseError:
            return False
        if value != target:
            return False
        have, need = collections.Counter(nums), collections.Counter(used)
        if any(need[x] > have[x] for x in need):
            return False
        return not self.use_all or need == have

    def is_well_formed(self, answer: str) -> bool:
        try:
            parse_expression(answer)
        except ParseError:
            return False
        return True

    def split_key(self, example: Example) -> str:
        nums, target = parse_prompt(example.prompt)
        return ",".join(map(str, sorted(nums))) + f"->{target}"


register_task("countdown", Countdown)
