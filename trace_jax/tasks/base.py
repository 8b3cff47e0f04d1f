"""Examples, the Task interface, answer extraction, and the task and reward registries."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Sequence

import numpy as np

ANSWER_MARK = "#"  # worked solutions end in "<steps>#<answer>"


@dataclasses.dataclass(frozen=True)
class Example:
    """One problem. ``solution`` is the SFT target: worked steps ending in ``answer``.

    A completion is the text the policy writes after ``prompt`` (EOS excluded); a solution is
    always a completion that earns reward 1.0.
    """

    prompt: str
    answer: str
    solution: str


RewardFn = Callable[[Example, str], float]


def extract_answer(completion: str) -> str:
    """The final answer of a completion: the text after the last ``#`` if there is one, else the
    whole completion; surrounding whitespace stripped. ``"6,4#46" -> "46"``, ``" 46\\n" -> "46"``.
    """
    if ANSWER_MARK in completion:
        completion = completion.rsplit(ANSWER_MARK, 1)[1]
    return completion.strip()


class Task:
    """A verifiable task: draws examples, scores completions.

    Subclasses implement :meth:`sample` and :meth:`is_correct` (and :meth:`is_well_formed` if the
    format reward is used), and set ``max_prompt_len`` / ``max_solution_len``: upper bounds, in
    characters (= :class:`~trace_jax.tokenizer.CharTokenizer` tokens), over every example the task
    can draw (for JSONL: the longest in the file; ``None`` for a task that cannot tell).
    ``examples``: the finite list a task draws from, where it has one (JSONL), else ``None``;
    ``experiment.build`` puts each of them through the run's tokenizer once.
    ``split_key(example)``: the text the held-out split hashes. Prompts that pose the same problem
    (``12+34=`` and ``34+12=``) must share a key, so that they fall in the same split; the
    default is the prompt itself.

    ``reward(example, completion)`` is 1.0 when the extracted answer is correct, else
    ``format_reward`` (default 0.0) when it is well formed, else 0.0.
    """

    name: str = "task"
    format_reward: float = 0.0
    max_prompt_len: int | None = None
    max_solution_len: int | None = None
    examples: Sequence[Example] | None = None

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        raise NotImplementedError

    def is_correct(self, example: Example, answer: str) -> bool:
        """Exact match of the extracted answer; tasks with many right answers override this."""
        return answer == example.answer

    def is_well_formed(self, answer: str) -> bool:
        return False

    def split_key(self, example: Example) -> str:
        return example.prompt

    def reward(self, example: Example, completion: str) -> float:
        answer = extract_answer(completion)
        if self.is_correct(example, answer):
            return 1.0
        if self.format_reward and self.is_well_formed(answer):
            return float(self.format_reward)
        return 0.0

    def rewards(self, examples: Sequence[Example], completions: Sequence[str]) -> np.ndarray:
        """``reward`` over a batch, as float32 ``[B]``."""
        if len(examples) != len(completions):
            raise ValueError(f"{len(examples)} examples but {len(completions)} completions")
        return np.array(
            [self.reward(e, c) for e, c in zip(examples, completions)], dtype=np.float32
        )


class RewardOverride(Task):
    """``task`` with its reward replaced by ``reward_fn(example, completion) -> float``."""

    def __init__(self, task: Task, reward_fn: RewardFn) -> None:
        self.task, self.reward_fn = task, reward_fn
        self.name, self.examples = task.name, task.examples
        self.max_prompt_len, self.max_solution_len = task.max_prompt_len, task.max_solution_len

    def sample(self, rng: np.random.Generator, n: int) -> list[Example]:
        return self.task.sample(rng, n)

    def reward(self, example: Example, completion: str) -> float:
        return float(self.reward_fn(example, completion))

    def is_correct(self, example: Example, answer: str) -> bool:  # (the accuracy metric)
        return self.task.is_correct(example, answer)

    def is_well_formed(self, answer: str) -> bool:
        return self.task.is_well_formed(answer)

    def split_key(self, example: Example) -> str:
        return self.task.split_key(example)


def with_reward(task: Task, reward_fn: RewardFn | str) -> Task:
    """``task`` scored by ``reward_fn`` (a callable or a name given to :func:`register_reward`)."""
    if isinstance(reward_fn, str):
        reward_fn = get_reward(reward_fn)
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be callable (Example, str) -> float, got {reward_fn!r}")
    return RewardOverride(task, reward_fn)


_TASKS: dict[str, Callable[..., Task]] = {}
_REWARDS: dict[str, RewardFn] = {}


def register_task(name: str, factory: Callable[..., Task] | None = None):
    """Register ``factory(**difficulty_kwargs) -> Task`` under ``name``; usable as a decorator.

    Re-registering a name replaces the factory.
    """

    def deco(f):
        _TASKS[name] = f
        return f

    return deco if factory is None else deco(factory)


def register_reward(name: str, fn: RewardFn | None = None):
    """Register ``fn(example, completion) -> float`` under ``name``; usable as a decorator."""

    def deco(f):
        if not callable(f):
            raise TypeError(f"reward {name!r} must be callable, got {f!r}")
        _REWARDS[name] = f
        return f

    return deco if fn is None else deco(fn)


def get_reward(name: str) -> RewardFn:
    if name not in _REWARDS:
        raise ValueError(f"unknown reward {name!r}; registered: {sorted(_REWARDS)}")
    return _REWARDS[name]


def task_names() -> list[str]:
    return sorted(_TASKS)


def get_task(name: str, *, reward_fn: RewardFn | str | None = None, **difficulty_kwargs) -> Task:
    """The task registered as ``name``, built with ``difficulty_kwargs``.

    An unknown name or knob raises ``ValueError`` naming it. ``reward_fn`` (a callable or a
    registered reward name) replaces the task's own reward.
    """
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; registered: {task_names()}")
    factory = _TASKS[name]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
        params = None
    if params is not None and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(difficulty_kwargs) - set(params))
        if unknown:
            raise ValueError(
                f"task {name!r} has no option(s) {unknown}; options: {sorted(params)}"
            )
    task = factory(**difficulty_kwargs)
    return task if reward_fn is None else with_reward(task, reward_fn)
