"""Sorting a list of non-negative integers in ascending order.

``get_task("sorting", length=5, min_length=None, digits=2)``
    prompt    ``"sort(5,31,9,1)="``
    solution  ``"1,5,9,31"``   (== answer; there are no worked steps)

Lists have ``min_length..length`` elements (``min_length`` defaults to ``length``), each uniform
in ``[0, 10**digits)``; duplicates can occur and are kept. The reward is exact match of the
comma-separated ascending list (no spaces). The held-out split's key is that sorted list: the
same numbers in another order are the same problem.
"""

from __future__ import annotations

import dataclasses
import re

from trace_jax.tasks.base import Example, Task, register_task

_LIST_RE = re.compile(r"[0-9]+(,[0-9]+)*")


@dataclasses.dataclass
class Sorting(Task):
    length: int = 5
    min_length: int | None = None  # None: same as length
    digits: int = 2
    format_reward: float = 0.0
    name: str = "sorting"

    def __post_init__(self):
        if self.min_length is None:
            self.min_length = self.length
        if not 1 <= self.min_length <= self.length:
            raise ValueError(
                f"sorting: need 1 <= min_length <= length, got {self.min_length}, {self.length}"
            )
        if not 1 <= self.digits <= 18:
            raise ValueError(f"sorting: need 1 <= digits <= 18, got {self.digits}")
        n, d = self.length, self.digits
        self.max_solution_len = n * d + n - 1
        self.max_prompt_len = len("sort()=") + self.max_solution_len

    def make(self, values: list[int]) -> Example:
        answer = ",".join(str(v) for v in sorted(values))
        return Example(
            prompt="sort(" + ",".join(str(v) for v in values) + ")=", answer=answer, solution=answer
        )

    def sample(self, rng, n):
        out = []
        for _ in range(n):
            k = int(rng.integers(self.min_length, self.length + 1))
            out.append(self.make([int(v) for v in rng.integers(0, 10**self.digits, size=k)]))
        return out

    def is_well_formed(self, answer: str) -> bool:
        return _LIST_RE.fullmatch(answer) is not None

    def split_key(self, example: Example) -> str:
        values = example.prompt[len("sort("):-len(")=")].split(",")
        return ",".join(sorted(values, key=int))


register_task("sorting", Sorting)
