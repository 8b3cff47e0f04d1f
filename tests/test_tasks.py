"""Tasks, rewards and datasets, checked against independent computation (Python ints, sorted(),
an ast-based evaluator), never against values the code under test produced."""

import ast
import collections
import json
import re

import numpy as np
import pytest

from trace_jax.tasks import (
    Dataset,
    Example,
    extract_answer,
    get_reward,
    get_task,
    register_reward,
    register_task,
    task_names,
)
from trace_jax.tokenizer import CharTokenizer

N = 300


def _rng(seed=0):
    return np.random.default_rng(seed)


def _bump(s):
    """A different answer string of the same shape: last digit changed."""
    return s[:-1] + str((int(s[-1]) + 1) % 10)


def _check_common(task, examples):
    tok = CharTokenizer()
    for ex in examples:
        tok.encode(ex.prompt + ex.solution)  # raises on a character outside the vocabulary
        assert len(ex.prompt) <= task.max_prompt_len
        assert len(ex.solution) <= task.max_solution_len
        assert task.reward(ex, ex.solution) == 1.0
        assert task.reward(ex, ex.solution + "\n") == 1.0
        assert task.reward(ex, "") == 0.0


# ---------------------------------------------------------------- addition / multiplication


@pytest.mark.parametrize("digits,min_digits", [(1, 1), (3, 1), (5, 3)])
@pytest.mark.parametrize("worked", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_addition(digits, min_digits, worked, reverse):
    task = get_task(
        "addition", digits=digits, min_digits=min_digits, worked=worked, reverse=reverse
    )
    exs = task.sample(_rng(), N)
    _check_common(task, exs)
    seen_digits = set()
    for ex in exs:
        m = re.fullmatch(r"(0|[1-9][0-9]*)\+(0|[1-9][0-9]*)=", ex.prompt)
        assert m, ex.prompt
        a, b = int(m.group(1)), int(m.group(2))
        seen_digits |= {len(m.group(1)), len(m.group(2))}
        want = str(a + b)[::-1] if reverse else str(a + b)
        assert ex.answer == want
        if worked:
            steps, ans = ex.solution.split("#")
            assert ans == want
            carry, sums = 0, []
            for i in range(max(len(m.group(1)), len(m.group(2)))):
                col = (a // 10**i) % 10 + (b // 10**i) % 10 + carry
                sums.append(col)
                carry = col // 10
            assert [int(s) for s in steps.split(",")] == sums
        else:
            assert ex.solution == want
        assert task.reward(ex, _bump(want)) == 0.0
        assert task.reward(ex, "1,2#" + _bump(want)) == 0.0
        assert task.reward(ex, _bump(want) + "#" + want) == 1.0  # answer is after the last '#'
    assert seen_digits == set(range(min_digits, digits + 1))


@pytest.mark.parametrize("digits,digits_b", [(2, 2), (3, 2), (4, 3)])
@pytest.mark.parametrize("worked", [False, True])
def test_multiplication(digits, digits_b, worked):
    task = get_task("multiplication", digits=digits, digits_b=digits_b, worked=worked)
    exs = task.sample(_rng(1), N)
    _check_common(task, exs)
    for ex in exs:
        m = re.fullmatch(r"(0|[1-9][0-9]*)\*(0|[1-9][0-9]*)=", ex.prompt)
        assert m, ex.prompt
        a, b = int(m.group(1)), int(m.group(2))
        assert len(m.group(1)) <= digits and len(m.group(2)) <= digits_b
        assert ex.answer == str(a * b)
        if worked:
            steps, ans = ex.solution.split("#")
            assert ans == str(a * b)
            parts = [int(p) for p in steps.split("+")]
            assert parts == [a * ((b // 10**i) % 10) * 10**i for i in range(len(str(b)))]
        assert task.reward(ex, _bump(str(a * b))) == 0.0


def test_format_reward():
    task = get_task("addition", digits=2, format_reward=0.1)
    ex = Example("12+34=", "46", "46")
    assert task.reward(ex, "46") == 1.0
    assert task.reward(ex, "47") == pytest.approx(0.1)
    assert task.reward(ex, "4x6") == 0.0
    assert task.reward(ex, "") == 0.0
    assert get_task("addition").reward(ex, "47") == 0.0  # off by default


def test_extract_answer():
    assert extract_answer("46") == "46"
    assert extract_answer(" 46\n") == "46"
    assert extract_answer("6,4#46") == "46"
    assert extract_answer("1#2#3") == "3"
    assert extract_answer("6,4#") == ""


# ---------------------------------------------------------------- sorting


@pytest.mark.parametrize("length,min_length,digits", [(5, None, 2), (8, 2, 3), (1, 1, 1)])
def test_sorting(length, min_length, digits):
    task = get_task("sorting", length=length, min_length=min_length, digits=digits)
    exs = task.sample(_rng(2), N)
    _check_common(task, exs)
    lo = length if min_length is None else min_length
    for ex in exs:
        m = re.fullmatch(r"sort\(([0-9]+(?:,[0-9]+)*)\)=", ex.prompt)
        assert m, ex.prompt
        vals = [int(v) for v in m.group(1).split(",")]
        assert lo <= len(vals) <= length and all(0 <= v < 10**digits for v in vals)
        want = ",".join(map(str, sorted(vals)))
        assert ex.answer == want and ex.solution == want
        assert task.reward(ex, ",".join(map(str, sorted(vals, reverse=True)))) == (
            1.0 if len(set(vals)) == 1 else 0.0
        )
        assert task.reward(ex, ",".join(map(str, sorted(vals)[:-1]))) == 0.0  # one dropped
        assert task.reward(ex, _bump(want)) == 0.0


# ---------------------------------------------------------------- countdown


def _ast_eval(text):
    """Independent evaluator: Python's parser restricted to ints, + - * and parentheses."""
    numbers = []

    def ev(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            numbers.append(node.value)
            return node.value
        if isinstance(node, ast.BinOp):
            ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y,
                   ast.Mult: lambda x, y: x * y}
            return ops[type(node.op)](ev(node.left), ev(node.right))
        raise AssertionError(f"unexpected node {ast.dump(node)}")

    return ev(ast.parse(text, mode="eval").body), numbers


@pytest.mark.parametrize(
    "kw", [{}, {"worked": True}, {"count": 6, "max_num": 25, "max_target": 500},
           {"count": 3, "use_all": True}]
)
def test_countdown_solutions_valid(kw):
    task = get_task("countdown", **kw)
    exs = task.sample(_rng(3), N)
    _check_common(task, exs)
    for ex in exs:
        m = re.fullmatch(r"([0-9]+(?:,[0-9]+)*)->([0-9]+):", ex.prompt)
        assert m, ex.prompt
        nums, target = [int(x) for x in m.group(1).split(",")], int(m.group(2))
        assert len(nums) == kw.get("count", 4)
        assert 1 <= target <= kw.get("max_target", 100)
        assert ex.solution.endswith(ex.answer)
        value, used = _ast_eval(ex.answer)
        assert value == target
        assert not collections.Counter(used) - collections.Counter(nums)
        if kw.get("use_all"):
            assert sorted(used) == sorted(nums)
        if kw.get("worked"):
            steps = ex.solution.split("#")[0].split(",")
            assert len(steps) == len(used) - 1
            for step in steps:
                lhs, rhs = step.split("=")
                assert _ast_eval(lhs)[0] == int(rhs)
            assert int(steps[-1].split("=")[1]) == target
        assert task.reward(ex, ex.answer + "+1") == 0.0  # wrong target (or malformed)


def test_countdown_reward_rules():
    task = get_task("countdown")
    ex = Example("3,5,7,2->22:", "3*5+7", "3*5+7")
    ok = ["3*5+7", "7+5*3", "5*3+7", " 3 * 5 + 7 ", "(3*5)+7",
          "2#3*5+7", "(7-2)*5-3"]
    for c in ok:
        assert task.reward(ex, c) == 1.0, c
    bad = {
        "reuses a number": "7*3+7-3-2",  # 7 twice, 3 twice
        "reuses 5": "5*5-3",
        "unavailable number": "4*5+2",
        "unavailable 22": "22",
        "wrong target": "3*5+2",
        "malformed op": "3*+5+7",
        "unbalanced": "(3*5+7",
        "extra paren": "3*5+7)",
        "adjacent numbers": "3 5",
        "leading zero": "03*5+7",
        "unary minus": "-3+5*5",
        "division": "7*(5-2)+3/3",
        "equation": "3*5+7=22",
        "empty": "",
        "letters": "x",
        "python power": "3**2+5+7+1",
        "deep nesting": "(" * 2000 + "3" + ")" * 2000,
    }
    for why, c in bad.items():
        assert task.reward(ex, c) == 0.0, why
    dup = Example("2,2,5->9:", "2+2+5", "2+2+5")
    assert task.reward(dup, "2+2+5") == 1.0  # a number given twice may be used twice
    assert task.reward(dup, "2+2+5-2+2") == 0.0  # but not three times
    all_task = get_task("countdown", count=3, use_all=True)
    ex3 = Example("3,5,7->22:", "3*5+7", "3*5+7")
    assert all_task.reward(ex3, "3*5+7") == 1.0
    ex3b = Example("3,5,2->15:", "3*5", "3*5")
    assert all_task.reward(ex3b, "3*5") == 0.0  # 2 unused
    assert get_task("countdown", count=3).reward(ex3b, "3*5") == 1.0


def test_countdown_format_reward():
    task = get_task("countdown", format_reward=0.1)
    ex = Example("3,5,7,2->22:", "3*5+7", "3*5+7")
    assert task.reward(ex, "3*5+2") == pytest.approx(0.1)
    assert task.reward(ex, "3*5+") == 0.0
    assert task.reward(ex, "3*5+7") == 1.0


# ---------------------------------------------------------------- registry and custom rewards


def test_registry():
    assert {"addition", "multiplication", "sorting", "countdown", "jsonl"} <= set(task_names())
    with pytest.raises(ValueError, match="nosuchtask"):
        get_task("nosuchtask")
    with pytest.raises(ValueError, match="digitz"):
        get_task("addition", digitz=3)
    with pytest.raises(ValueError, match="min_digits"):
        get_task("addition", digits=2, min_digits=3)


def test_custom_reward_and_task():
    def half(example, completion):
        return 0.5 if extract_answer(completion) == example.answer else -1.0

    ex = Example("1+2=", "3", "3")
    task = get_task("addition", digits=1, reward_fn=half)
    assert task.reward(ex, "3") == 0.5 and task.reward(ex, "4") == -1.0
    assert len(task.sample(_rng(), 3)) == 3

    register_reward("test_half", half)
    assert get_reward("test_half") is half
    assert get_task("addition", reward_fn="test_half").reward(ex, "4") == -1.0
    with pytest.raises(ValueError, match="no_such_reward"):
        get_task("addition", reward_fn="no_such_reward")

    register_task("test_half_addition", lambda **kw: get_task("addition", reward_fn=half, **kw))
    assert get_task("test_half_addition", digits=1).reward(ex, "3") == 0.5
    # the accuracy metric (is_correct) and the format check stay the task's own
    cd, custom = get_task("countdown"), get_task("countdown", reward_fn=half)
    e = Example("3,10,7,9->19:", "10+9", "10+9")
    assert cd.is_correct(e, "9+10")  # another right answer than the reference
    for a in ("9+10", "10+9", "3+7", "", "1+"):
        assert custom.is_correct(e, a) == cd.is_correct(e, a), a
        assert custom.is_well_formed(a) == cd.is_well_formed(a), a


# ---------------------------------------------------------------- datasets


def _prompts(batch):
    return [e.prompt for e in batch]


def test_dataset_deterministic_by_seed_and_step():
    task = get_task("addition", digits=3)
    a = Dataset(task, batch_size=16, seed=7)
    b = Dataset(get_task("addition", digits=3), batch_size=16, seed=7)
    for _ in range(3):
        a.batch(0)  # history does not matter
    assert [a.batch(s) for s in (5, 0, 9)] == [b.batch(s) for s in (5, 0, 9)]
    assert len(a.batch(3)) == 16
    assert _prompts(a.batch(1)) != _prompts(a.batch(2))
    assert _prompts(a.batch(1)) != _prompts(Dataset(task, 16, seed=8).batch(1))
    it = iter(a)
    assert [next(it) for _ in range(3)] == [a.batch(0), a.batch(1), a.batch(2)]


def test_heldout_split_disjoint():
    task = get_task("addition", digits=1)  # only 100 distinct prompts: streams would collide
    train = Dataset(task, 32, seed=0, split="train", eval_fraction=0.2)
    held = Dataset(task, 32, seed=0, split="eval", eval_fraction=0.2)
    tr = {p for s in range(40) for p in _prompts(train.batch(s))}
    ev = {p for s in range(40) for p in _prompts(held.batch(s))}
    assert len(ev) >= 5 and len(tr) >= 50
    assert not tr & ev
    assert len(tr | ev) == 100  # everything is in one split or the other
    assert Dataset(task, 32, 0, "eval", 0.2).batch(3) == held.batch(3)
    # Without the content split the two seed streams overlap on this small space.
    tr0 = {p for s in range(40) for p in _prompts(Dataset(task, 32, 0, "train", 0.0).batch(s))}
    ev0 = {p for s in range(40) for p in _prompts(Dataset(task, 32, 0, "eval", 0.0).batch(s))}
    assert tr0 & ev0


# ---------------------------------------------------------------- JSONL


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_task(tmp_path):
    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(10)]
    rows[0]["solution"] = "0,0#0"
    path = _write(tmp_path / "p.jsonl", [json.dumps(r) for r in rows[:5]] + [""] +
                  [json.dumps(r) for r in rows[5:]])
    task = get_task("jsonl", path=str(path))
    assert len(task.examples) == 10
    by_prompt = {r["prompt"]: r for r in rows}
    exs = task.sample(_rng(), 50)
    for ex in exs:
        r = by_prompt[ex.prompt]
        assert ex.answer == r["answer"]
        assert ex.solution == r.get("solution", r["answer"])
        assert task.reward(ex, ex.solution) == 1.0
        assert task.reward(ex, r["answer"] + "1") == 0.0
    assert task.examples[0].solution == "0,0#0"
    ds = Dataset(task, 4, seed=0, eval_fraction=0.0)
    fresh = Dataset(get_task("jsonl", path=str(path)), 4, 0, eval_fraction=0.0)
    assert ds.batch(2) == fresh.batch(2)


@pytest.mark.parametrize(
    "bad,msg",
    [('{"prompt": "1+1=", "answer": "2"', "not valid JSON"),
     ('["1+1=", "2"]', "JSON object"),
     ('{"prompt": "1+1="}', "answer"),
     ('{"prompt": "1+1=", "answer": 2}', "string")],
)
def test_jsonl_malformed_line(tmp_path, bad, msg):
    good = json.dumps({"prompt": "1+1=", "answer": "2"})
    path = _write(tmp_path / "bad.jsonl", [good, "", good, bad, good])
    with pytest.raises(ValueError, match=rf"bad\.jsonl:4: .*{msg}"):
        get_task("jsonl", path=str(path))


def test_jsonl_empty_split_raises_at_first_batch(tmp_path):
    path = _write(tmp_path / "one.jsonl", [json.dumps({"prompt": "1+1=", "answer": "2"})])
    task = get_task("jsonl", path=str(path))
    from trace_jax.tasks import split_of

    other = "train" if split_of("1+1=", 0.5) == "eval" else "eval"
    with pytest.raises(ValueError, match=f"split '{other}' of task 'jsonl:one.jsonl' is empty"):
        Dataset(task, 2, seed=0, split=other, eval_fraction=0.5).batch(0)
    # a tiny held-out share of a finite task: refused at once, not after a billion draws
    with pytest.raises(ValueError, match="'eval' .* is empty: none of its 1 examples"):
        Dataset(task, 2, seed=0, split="eval", eval_fraction=1e-9).batch(0)
    Dataset(task, 2, seed=0, split=split_of("1+1=", 0.5), eval_fraction=0.5).batch(0)


@pytest.mark.parametrize(
    "name,kw,same",
    [("addition", {"digits": 2}, ["12+34=", "34+12="]),
     ("multiplication", {"digits": 2}, ["7*45=", "45*7="]),
     ("countdown", {}, ["3,5,7,2->22:", "7,2,5,3->22:", "2,3,5,7->22:"]),
     ("sorting", {"length": 3}, ["sort(5,31,9)=", "sort(31,9,5)="])],
)
def test_heldout_split_keeps_each_problem_on_one_side(name, kw, same):
    """Prompts that pose one problem in another order (commuted operands, reordered numbers)
    share a split key, so a held-out problem is never trained on in another wording; the
    prompt-text hash put about half of the held-out problems' twins in training."""
    task = get_task(name, **kw)
    exs = [Example(prompt=p, answer="", solution="") for p in same]
    assert len({task.split_key(e) for e in exs}) == 1
    assert len({task.split_key(e) for e in task.sample(_rng(), 200)}) > 20  # not one key for all
    # over many drawn problems: no key (problem) on both sides
    frac = 0.3
    held = Dataset(task, 64, seed=0, split="eval", eval_fraction=frac)
    train = Dataset(task, 64, seed=0, split="train", eval_fraction=frac)
    ev = {task.split_key(e) for s in range(8) for e in held.batch(s)}
    tr = {task.split_key(e) for s in range(8) for e in train.batch(s)}
    assert ev and tr and not ev & tr
    # the override keeps the task's key
    custom = get_task(name, reward_fn=lambda e, c: 0.0, **kw)
    assert custom.split_key(exs[0]) == task.split_key(exs[-1])


def test_config_eval_fraction_reaches_every_data_stream():
    """``task.eval_fraction`` sets the held-out share of the experiment's eval stream, its RL
    stream and the SFT batches alike, so the held-out prompts are never trained on; configs
    saved before the field existed get the old 0.05."""
    from configs import tiny
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    config = tiny.get_config()
    config.task.eval_fraction = 0.3
    exp = X.build(config)
    assert exp.train_data.eval_fraction == exp.eval_data.eval_fraction == 0.3
    held = {p for s in range(30) for p in _prompts(exp.eval_data.batch(s))}
    rl = {p for s in range(30) for p in _prompts(exp.train_data.batch(s))}
    sft = set()  # the prompts of the SFT batches: the tokens before the loss mask starts
    for s in range(10):
        toks, mask = RUN.sft_batch(exp, s, 32)
        for row, m in zip(np.asarray(toks), np.asarray(mask)):
            sft.add(exp.tokenizer.decode([int(t) for t in row[: int(np.argmax(m))]]))
    assert len(held) >= 15  # 30% of one-digit addition's 100 prompts
    assert len(sft) >= 40  # (decoded prompts: BOS dropped)
    assert not held & rl and not held & sft
    # ... split by problem in every stream: no commuted twin of a held-out prompt either
    key = lambda p: exp.task.split_key(Example(p, "", ""))  # noqa: E731
    assert exp.train_data.split_by == exp.eval_data.split_by == "problem"
    assert not {key(p) for p in held} & {key(p) for p in rl | sft}
    config.task.unlock()  # (a config.json from before the field: loaded unlocked)
    del config.task["eval_fraction"]
    assert X.build(config).eval_data.eval_fraction == 0.05


@pytest.mark.parametrize(
    "lines,msg",
    [(['{"prompt": "q", "answer": " "}'], "answer' is empty"),
     (['{"prompt": "lang?", "answer": "c#"}'], "final answer .* is '', not the answer 'c#'"),
     (['{"prompt": "q", "answer": "4", "solution": "two plus two is 4"}'],
      "final answer .* is 'two plus two is 4', not the answer '4'"),
     (['{"prompt": "q", "answer": "x"}', '{"prompt": "q", "answer": "y"}'],
      "has answer 'y' here and 'x' on line 3")],
)
def test_jsonl_lines_the_reward_cannot_score_are_refused(tmp_path, lines, msg):
    """A line whose exact-match reward would be wrong is refused at load, naming the line: an
    empty answer (free reward for an empty completion), a solution that would score 0, an answer
    containing the answer mark, a prompt repeated with another answer."""
    good = json.dumps({"prompt": "1+1=", "answer": "2", "solution": "1+1#2"})
    path = _write(tmp_path / "bad.jsonl", [good, good, *lines])
    with pytest.raises(ValueError, match=rf"bad\.jsonl:{len(lines) + 2}: .*{msg}"):
        get_task("jsonl", path=str(path))


def test_jsonl_bytes_not_utf8_and_a_byte_order_mark(tmp_path):
    good = json.dumps({"prompt": "1+1=", "answer": "2"}).encode()
    path = tmp_path / "enc.jsonl"
    path.write_bytes(good + b"\n" + b'{"prompt": "caf\xe9", "answer": "1"}\n')
    with pytest.raises(ValueError, match=r"enc\.jsonl:2: not UTF-8"):
        get_task("jsonl", path=str(path))
    path.write_bytes(b"\xef\xbb\xbf" + good + b"\n" + good + b"\n")  # BOM; a repeat is fine
    assert [e.prompt for e in get_task("jsonl", path=str(path)).examples] == ["1+1=", "1+1="]
    # ... and so is a repeat whose answer differs only in the whitespace the reward strips
    path.write_bytes(good + b"\n" + json.dumps({"prompt": "1+1=", "answer": "2\n"}).encode())
    t = get_task("jsonl", path=str(path))
    assert [t.reward(e, "1+1#2") for e in t.examples] == [1.0, 1.0]


def test_jsonl_examples_go_through_the_tokenizer_when_the_run_is_built(tmp_path):
    """A JSONL example the run's tokenizer cannot encode stops ``experiment.build`` (naming the
    example) instead of the first batch that draws it, hours into a run; the prompt width and
    the max_new_tokens check are measured in tokens over the file's examples."""
    from configs import tiny
    from trace_jax import experiment as X

    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in range(40)]
    path = _write(tmp_path / "p.jsonl", [json.dumps(r) for r in rows])
    config = tiny.get_config()
    config.task.name, config.task.kwargs = "jsonl", {"path": str(path)}
    exp = X.build(config)
    assert exp.prompt_width == len("39+39=") + 1  # + BOS
    config.rollout.max_new_tokens = 2  # "78" + EOS needs 3
    with pytest.raises(ValueError, match=r"longest solution \(2 tokens\) and EOS"):
        X.build(config)
    config.rollout.max_new_tokens = 8
    path = _write(tmp_path / "p.jsonl", [json.dumps(r) for r in rows]
                  + [json.dumps({"prompt": "What is 2+2?", "answer": "4"})])
    with pytest.raises(ValueError, match=r"the prompt of example 41 \('What is 2\+2\?'\) "
                                         r"cannot be encoded: character 'W'"):
        X.build(config)


def test_sft_batch_refuses_a_target_it_would_cut():
    """A solution (with EOS) longer than max_new_tokens leaves after the prompt would lose its
    end, and SFT would teach the policy never to stop: refused, naming the prompt and the
    field. (The build checks this up front where it can measure solutions: the char tokenizer or
    a JSONL task; here the measured width is bypassed as an HF tokenizer's would be.)"""
    import dataclasses

    from configs import tiny
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    exp = X.build(tiny.get_config())
    toks, mask = RUN.sft_batch(exp, 0, 4)  # one-digit addition: at most 2 digits + EOS fit
    assert mask.sum(1).max() <= exp.sampling.max_new_tokens
    short = dataclasses.replace(exp, sampling=dataclasses.replace(exp.sampling, max_new_tokens=1))
    with pytest.raises(ValueError, match=r"SFT target of '\d\+\d=' is \d tokens with EOS.*"
                                         r"rollout.max_new_tokens=1"):
        RUN.sft_batch(short, 0, 4)


def test_a_task_without_length_bounds_is_measured_on_a_sample():
    """A registered task that leaves max_prompt_len / max_solution_len at None ("cannot tell")
    gets its prompt width and the max_new_tokens check from a sample of its examples, in the
    char tokenizer too (it used to fail with a bare TypeError)."""
    from configs import tiny
    from trace_jax import experiment as X

    def unbounded(**kw):
        t = get_task("addition", **kw)
        t.max_prompt_len = t.max_solution_len = None
        return t

    register_task("test_unbounded_addition", unbounded)
    c = tiny.get_config()
    bounded = X.build(c)
    c.task.name = "test_unbounded_addition"
    exp = X.build(c)
    assert exp.prompt_width == bounded.prompt_width  # (every width is drawn in 2048 samples)
    c.rollout.max_new_tokens = 2
    with pytest.raises(ValueError, match=r"max_new_tokens=2 cannot hold the task's longest "
                                         r"solution \(\d+ tokens\)"):
        X.build(c)
