"""Tasks read from a JSONL file of ``{"prompt": ..., "answer": ..., "solution": ...}`` lines.

``get_task("jsonl", path="problems.jsonl", format_reward=0.0)``

Each non-blank line is a JSON object with string fields ``prompt`` and ``answer`` and an optional
string ``solution`` (the SFT target; defaults to ``answer``); other keys are ignored. A line that
is not such an object raises ``ValueError`` naming the file and the 1-based line number.
``sample`` draws lines uniformly with replacement. The reward is exact match of the extracted
answer (text after the last ``#`` of the completion, or the whole completion, stripped) against
``answer.strip()``. For another scoring rule pass ``reward_fn=`` to ``get_task``.
"""

from __future__ import annotations

import json
from pathlib import Path

from trace_jax.tasks.base import Example, Task, register_task


def load_jsonl(path: str | Path) -> list[Example]:
    examples = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            for key in ("prompt", "answer"):
                if key not in obj:
                    raise ValueError(f"{where}: missing field {key!r}")
            solution = obj.get("solution", obj["answer"])
            for key, value in (("prompt", obj["prompt"]), ("answer", obj["answer"]),
                               ("solution", solution)):
                if not isinstance(value, str):
                    raise ValueError(
                        f"{where}: field {key!r} must be a string, got {type(value).__name__}"
                    )
            examples.append(Example(prompt=obj["prompt"], answer=obj["answer"], solution=solution))
    if not examples:
        raise ValueError(f"{path}: no examples")
    return examples


class JsonlTask(Task):
    def __init__(self, path: str | Path, format_reward: float = 0.0) -> None:
        self.path = str(path)
        self.examples = load_jsonl(path)
        self.format_reward = format_reward
        self.name = f"jsonl:{Path(path).name}"
        self.max_prompt_len = max(len(e.prompt) for e in self.examples)
        self.max_solution_len = max(len(e.solution) for e in self.examples)

    def sample(self, rng, n):
        return [self.examples[int(i)] for i in rng.integers(0, len(self.examples), size=n)]

    def is_correct(self, example, answer):
        return answer == example.answer.strip()

    def is_well_formed(self, answer):
        return bool(answer)


register_task("jsonl", JsonlTask)
