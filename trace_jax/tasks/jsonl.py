"""Tasks read from a JSONL file of ``{"prompt": ..., "answer": ..., "solution": ...}`` lines.

``get_task("jsonl", path="problems.jsonl", format_reward=0.0)``

Each non-blank line is a JSON object with string fields ``prompt`` and ``answer`` and an optional
string ``solution`` (the SFT target; defaults to ``answer``); other keys are ignored. A line that
is not such an object raises ``ValueError`` naming the file and the 1-based line number, and so
does one that the exact-match reward could not score as the file means it: an empty answer (an
empty completion would earn 1.0), a solution whose final answer (after its last ``#``) is not the
answer (SFT would train on a completion that scores 0; an answer containing ``#`` can never
match), text that is not UTF-8, or a prompt repeated with another answer.
``sample`` draws lines uniformly with replacement. The reward is exact match of the extracted
answer (text after the last ``#`` of the completion, or the whole completion, stripped) against
``answer.strip()``. For another scoring rule pass ``reward_fn=`` to ``get_task``.
"""

from __future__ import annotations

import json
from pathlib import Path

from trace_jax.tasks.base import Example, Task, extract_answer, register_task


def load_jsonl(path: str | Path) -> list[Example]:
    examples = []
    answers: dict[str, tuple[str, int]] = {}  # prompt -> (answer, line of its first occurrence)
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 text ({e.reason} at byte "
                                 f"{e.start})") from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")  # a UTF-8 byte-order mark
            if not line.strip():
                continue
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
            prompt, answer = obj["prompt"], obj["answer"]
            if not answer.strip():
                raise ValueError(f"{where}: field 'answer' is empty (an empty completion would "
                                 f"earn reward 1.0)")
            if extract_answer(solution) != answer.strip():
                raise ValueError(
                    f"{where}: the solution's final answer (the text after its last '#') is "
                    f"{extract_answer(solution)!r}, not the answer {answer.strip()!r}: the "
                    f"exact-match reward would score it 0 (an answer may not contain '#')")
            first = answers.setdefault(prompt, (answer, lineno))
            if first[0].strip() != answer.strip():  # (the reward compares them stripped)
                raise ValueError(f"{where}: prompt {prompt!r} has answer {answer!r} here and "
                                 f"{first[0]!r} on line {first[1]}: exact match can reward one")
            examples.append(Example(prompt=prompt, answer=answer, solution=solution))
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
