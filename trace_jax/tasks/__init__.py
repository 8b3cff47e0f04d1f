"""Verifiable synthetic tasks, rewards and datasets.

Public API:

    Example(prompt, answer, solution)                 frozen dataclass
    Task: sample(rng, n) -> list[Example]; reward(example, completion) -> float;
          rewards(examples, completions) -> np.float32 [B]; max_prompt_len, max_solution_len;
          split_key(example) -> str (one key per problem, however worded: the held-out split's)
    extract_answer(completion) -> str                 text after the last "#", stripped
    get_task(name, *, reward_fn=None, **difficulty_kwargs) -> Task
    register_task(name, factory=None)                 (decorator or call)
    register_reward(name, fn=None), get_reward(name), with_reward(task, reward_fn)
    task_names() -> list[str]
    Dataset(task, batch_size, seed, split="train"|"eval", eval_fraction=0.05,
            split_by="problem"|"prompt").batch(step)
    split_of(task.split_key(example), eval_fraction) -> "train" | "eval"
    JsonlTask(path), load_jsonl(path)

Registered tasks (formats in each module's docstring):

    addition        "12+34="         -> "46"         worked: "6,4#46"
    multiplication  "123*45="        -> "5535"       worked: "615+4920#5535"
    sorting         "sort(5,31,9)="  -> "5,9,31"
    countdown       "3,5,7,2->22:"   -> "3*5+7"      worked: "3*5=15,15+7=22#3*5+7"
    jsonl           path=...         exact match against each line's "answer"

A completion is what the policy writes after the prompt; its final answer is the text after its
last ``#`` (or all of it), stripped. ``reward`` is 1.0 when that answer is correct, else the task's
``format_reward`` (default 0.0) when it is well formed, else 0.0.

Plugging in a reward. Any ``Callable[[Example, str], float]`` works:

    def lenient(example, completion):
        return float(extract_answer(completion).lstrip("0") == example.answer.lstrip("0"))

    task = get_task("addition", digits=3, reward_fn=lenient)       # one-off
    register_reward("lenient", lenient)                             # or by name, e.g. from a
    task = get_task("addition", digits=3, reward_fn="lenient")      # config string
    register_task("lenient_addition",                               # or as a new task name
                  lambda **kw: get_task("addition", reward_fn=lenient, **kw))

Every character of every prompt and solution the built-in tasks produce is in the
:class:`~trace_jax.tokenizer.CharTokenizer` vocabulary.
"""

from trace_jax.tasks.base import (
    ANSWER_MARK,
    Example,
    RewardFn,
    Task,
    extract_answer,
    get_reward,
    get_task,
    register_reward,
    register_task,
    task_names,
    with_reward,
)
from trace_jax.tasks.arithmetic import Addition, Multiplication
from trace_jax.tasks.countdown import Countdown, parse_expression, parse_prompt
from trace_jax.tasks.dataset import EVAL_FRACTION, SPLIT_BY, Dataset, split_of
from trace_jax.tasks.jsonl import JsonlTask, load_jsonl
from trace_jax.tasks.sorting import Sorting

__all__ = [
    "ANSWER_MARK", "EVAL_FRACTION", "SPLIT_BY", "Addition", "Countdown", "Dataset", "Example",
    "JsonlTask", "Multiplication", "RewardFn", "Sorting", "Task", "extract_answer", "get_reward",
    "get_task", "load_jsonl", "parse_expression", "parse_prompt", "register_reward",
    "register_task", "split_of", "task_names", "with_reward",
]
