"""Deterministic, resumable batches of examples, with a content-disjoint held-out split.

``Dataset(task, batch_size, seed, split="train" | "eval", eval_fraction=0.05)``

``batch(step)`` depends only on ``(task settings, batch_size, seed, split, eval_fraction, step)``:
it draws from ``np.random.default_rng([seed, split_stream, step])``, so a run resumed at data
position ``step`` sees exactly the batches an uninterrupted run would, with no state to save
beyond the step.

Held-out split: every prompt is assigned to ``"eval"`` when
``blake2b(prompt) / 2**64 < eval_fraction`` and to ``"train"`` otherwise, and each split keeps only
its own prompts (rejection sampling). So no eval prompt ever appears in a train batch, even for
small problem spaces where the two seed streams would draw the same problem. With
``eval_fraction=0`` no filtering happens and the splits differ only by seed stream. A split that
the task almost never reaches (e.g. a JSONL file with no line hashed to ``"eval"``) raises
``ValueError`` instead of looping.
"""

from __future__ import annotations

import hashlib

import numpy as np

from trace_jax.tasks.base import Example, Task

_SPLIT_STREAM = {"train": 0, "eval": 1}


# The held-out share when a config does not name one (``task.eval_fraction``).
EVAL_FRACTION = 0.05


def prompt_split(prompt: str, eval_fraction: float) -> str:
    """``"eval"`` or ``"train"``: a fixed function of the prompt text."""
    h = int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest(), "little")
    return "eval" if h < eval_fraction * 2.0**64 else "train"


class Dataset:
    def __init__(
        self,
        task: Task,
        batch_size: int,
        seed: int,
        split: str = "train",
        eval_fraction: float = EVAL_FRACTION,
    ) -> None:
        if split not in _SPLIT_STREAM:
            raise ValueError(f"split must be one of {sorted(_SPLIT_STREAM)}, got {split!r}")
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.task, self.batch_size, self.seed = task, batch_size, int(seed)
        self.split, self.eval_fraction = split, eval_fraction

    def in_split(self, example: Example) -> bool:
        if self.eval_fraction == 0.0:
            return True
        return prompt_split(example.prompt, self.eval_fraction) == self.split

    def batch(self, step: int) -> list[Example]:
        """The ``batch_size`` examples at data position ``step`` (>= 0)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
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
