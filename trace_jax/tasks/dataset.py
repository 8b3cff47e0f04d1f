"""Deterministic, resumable batches of examples, with a content-disjoint held-out split.

``Dataset(task, batch_size, seed, split="train" | "eval", eval_fraction=0.05,
split_by="problem")``

``batch(step)`` depends only on ``(task settings, batch_size, seed, split, eval_fraction,
split_by, step)``: it draws from ``np.random.default_rng([seed, split_stream, step])``, so a run
resumed at data position ``step`` sees exactly the batches an uninterrupted run would, with no
state to save beyond the step.

Held-out split: every example is assigned to ``"eval"`` when
``blake2b(task.split_key(example)) / 2**64 < eval_fraction`` and to ``"train"`` otherwise, and
each split keeps only its own examples (rejection sampling). The key names the problem, not its
wording: ``12+34=`` and ``34+12=`` share one (each task's ``split_key`` says how; the default is
the prompt). So no held-out problem is ever trained on, in any order of its operands, even for
small problem spaces where the two seed streams would draw the same problem. ``split_by="prompt"``
hashes the prompt text instead: the split before session 41 (kept so that runs from then resume
and reproduce on their own split; it can put ``34+12=`` in training and ``12+34=`` in eval). With
``eval_fraction=0`` no filtering happens and the splits differ only by seed stream. A split
with no examples raises ``ValueError`` from ``batch``: at once for a task with a finite example
list (JSONL), else after a bounded number of draws.
"""

from __future__ import annotations

import hashlib

import numpy as np

from trace_jax.tasks.base import Example, Task

_SPLIT_STREAM = {"train": 0, "eval": 1}


# The held-out share when a config does not name one (``task.eval_fraction``).
EVAL_FRACTION = 0.05
SPLIT_BY = ("problem", "prompt")  # what the held-out split hashes (``task.split_by``)


def split_of(key: str, eval_fraction: float) -> str:
    """``"eval"`` or ``"train"``: a fixed function of a split key (``Task.split_key``)."""
    h = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")
    return "eval" if h < eval_fraction * 2.0**64 else "train"


class Dataset:
    def __init__(
        self,
        task: Task,
        batch_size: int,
        seed: int,
        split: str = "train",
        eval_fraction: float = EVAL_FRACTION,
        split_by: str = "problem",
    ) -> None:
        if split not in _SPLIT_STREAM:
            raise ValueError(f"split must be one of {sorted(_SPLIT_STREAM)}, got {split!r}")
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if split_by not in SPLIT_BY:
            raise ValueError(f"split_by must be one of {SPLIT_BY}, got {split_by!r}")
        self.split_by = split_by
        self.task, self.batch_size, self.seed = task, batch_size, int(seed)
        self.split, self.eval_fraction = split, eval_fraction
        self._checked = False  # a finite task's split is checked for emptiness at first use

    def in_split(self, example: Example) -> bool:
        if self.eval_fraction == 0.0:
            return True
        key = self.task.split_key(example) if self.split_by == "problem" else example.prompt
        return split_of(key, self.eval_fraction) == self.split

    def batch(self, step: int) -> list[Example]:
        """The ``batch_size`` examples at data position ``step`` (>= 0)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if not self._checked:
            examples = self.task.examples
            if examples is not None and not any(self.in_split(e) for e in examples):
                raise ValueError(
                    f"split {self.split!r} of task {self.task.name!r} is empty: none of its "
                    f"{len(examples)} examples hashes there at eval_fraction="
                    f"{self.eval_fraction}")
            self._checked = True
        rng = np.random.default_rng([self.seed, _SPLIT_STREAM[self.split], int(step)])
        p = 1.0
        if self.eval_fraction > 0.0:
            p = self.eval_fraction if self.split == "eval" else 1.0 - self.eval_fraction
        out: list[Example] = []
        drawn, limit = 0, 200 * int(np.ceil(self.batch_size / p)) + 1000
        while len(out) < self.batch_size:
            if drawn > limit:
                raise ValueError(
                    f"split {self.split!r} of task {self.task.name!r}: only {len(out)} of "
                    f"{self.batch_size} examples after {drawn} draws (eval_fraction="
                    f"{self.eval_fraction}); the task has (almost) no prompts in this split"
                )
            chunk = int(np.ceil((self.batch_size - len(out)) / p)) + 4
            for ex in self.task.sample(rng, chunk):
                if len(out) < self.batch_size and self.in_split(ex):
                    out.append(ex)
            drawn += chunk
        return out

    def __iter__(self):
        """Batches from step 0 onward."""
        step = 0
        while True:
            yield self.batch(step)
            step += 1
