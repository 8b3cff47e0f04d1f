"""Everything a run needs, built once from a config: model config, tokenizer, task and datasets,
sampler, and the rollout/trainer numerics of the chosen variant."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from trace_jax import distributed as D
from trace_jax import model as M
from trace_jax import numerics as nx
from trace_jax import rollout as R
from trace_jax import tasks
from trace_jax import tokenizer as tok_lib


@dataclasses.dataclass(frozen=True)
class Variant:
    """How rollout and trainer compute, per METHOD.md section 7."""

    rollout_mode: str
    train_mode: str
    hints: bool


VARIANTS = {
    "bf16": Variant("bf16", "bf16", False),  # BF16 rollout + BF16 train
    "fp4_naive": Variant("fp4_rollout", "bf16", False),  # FP4 rollout, BF16 trainer
    "fp4_qat_rtn": Variant("fp4_rollout", "fp4_qat", False),  # vanilla W4A4 QAT
    "fp4_qat_w4a16": Variant("fp4_rollout", "fp4_qat_w4a16", False),  # QUADS-style trainer
    "trace": Variant("fp4_rollout", "fp4_qat", True),  # hint-guided W4A4 QAT
}


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; expected one of {sorted(VARIANTS)}")
    return VARIANTS[name]


@dataclasses.dataclass(frozen=True)
class Experiment:
    cfg: M.ModelConfig
    tokenizer: object
    task: object
    train_data: tasks.Dataset
    eval_data: tasks.Dataset
    sampling: R.SamplingConfig
    prompt_width: int
    rollout_numerics: nx.Numerics
    train_numerics: nx.Numerics
    variant: Variant
    group_size: int
    # the sites the config's hint_sites / hint_layers name, whatever the variant: the code
    # agreement metrics split by them, so a variant without hints reports the same two site sets
    hint_sites: frozenset = frozenset()


def build(config, variant: str | None = None) -> Experiment:
    cfg = M.ModelConfig.from_config(config.model)
    tokenizer = tok_lib.get_tokenizer(config)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise ValueError(f"model.vocab_size={cfg.vocab_size} is smaller than the tokenizer's "
                         f"{tokenizer.vocab_size}")
    task = tasks.get_task(config.task.name, **dict(config.task.kwargs))
    rc = config.rollout
    char = config.get("tokenizer", {}).get("kind", "char") == "char"  # one token per character
    prompt_len, solution_len = task.max_prompt_len, (task.max_solution_len if char else None)
    if task.examples is not None:  # a finite task (JSONL): measured in tokens, checked up front
        prompt_len, solution_len = _token_lengths(tokenizer, task, task.examples)
    elif not char or prompt_len is None:
        # a generated task in another tokenizer, or one that cannot bound its prompts:
        # measured on a fixed sample
        p, solution_len = _token_lengths(tokenizer, task, task.sample(
            np.random.default_rng(0), SAMPLED_FOR_LENGTHS))
        prompt_len = max(prompt_len or 0, p)
    if solution_len and solution_len + 1 > rc.max_new_tokens:
        raise ValueError(f"rollout.max_new_tokens={rc.max_new_tokens} cannot hold the task's "
                         f"longest solution ({solution_len} tokens) and EOS: SFT "
                         f"targets would be cut and rollouts could not finish; raise it to "
                         f"{solution_len + 1}")
    # (configs saved before session 37 have no task.eval_fraction)
    frac = config.task.get("eval_fraction", tasks.EVAL_FRACTION)
    # (configs saved before session 41 have no task.split_by: their runs split by prompt text)
    split_by = config.task.get("split_by", "prompt")
    if split_by not in tasks.SPLIT_BY:
        raise ValueError(f"task.split_by must be one of {tasks.SPLIT_BY}, got {split_by!r}")
    if rc.batch_prompts < 1:
        raise ValueError(f"rollout.batch_prompts must be >= 1, got {rc.batch_prompts}")
    if config.seed < 0:
        raise ValueError(f"seed must be >= 0, got {config.seed}")
    train_data = tasks.Dataset(task, rc.batch_prompts, config.seed, "train", frac, split_by)
    eval_data = tasks.Dataset(task, rc.batch_prompts, config.seed, "eval", frac, split_by)
    sampling = R.SamplingConfig(
        max_new_tokens=rc.max_new_tokens, temperature=rc.temperature, top_k=rc.top_k,
        top_p=rc.top_p, eos_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
    width = prompt_len + 1  # + BOS
    v = get_variant(variant or config.variant)
    base = nx.numerics_from_config(config.numerics, "bf16", cfg.n_layers)
    if v.rollout_mode != "bf16":
        cfg.check_fp4(base.fmt)
    base = base.with_attention_p(rc.get("attention_p_precision", "f32"),
                                 "rollout.attention_p_precision")  # the trainer's P too
    rollout_num = base.with_mode(v.rollout_mode)
    train_num = base.with_mode(v.train_mode)
    hint_sites = train_num.hinted
    if not v.hints:
        train_num = dataclasses.replace(train_num, hinted=frozenset())
    if width + rc.max_new_tokens > cfg.max_seq_len:
        raise ValueError(f"task prompts ({width} tokens) + rollout.max_new_tokens "
                         f"({rc.max_new_tokens}) exceed model.max_seq_len={cfg.max_seq_len}")
    return Experiment(cfg, tokenizer, task, train_data, eval_data, sampling, width, rollout_num,
                      train_num, v, rc.group_size, hint_sites)


# Examples of a generated task whose token lengths size the prompt width and check
# rollout.max_new_tokens when the tokenizer is not one token per character. A rarer longer
# prompt is refused, naming it, when a batch draws it (Tokenizer.encode_batch).
SAMPLED_FOR_LENGTHS = 2048


def _token_lengths(tokenizer, task, examples) -> tuple[int, int]:
    """The longest prompt and solution of ``examples`` in ``tokenizer``'s tokens. An example
    the tokenizer cannot encode raises here, naming it, instead of when a batch first draws it."""
    longest = {"prompt": 0, "solution": 0}
    for i, ex in enumerate(examples):
        for field in longest:
            text = getattr(ex, field)
            try:
                n = len(tokenizer.encode(text))
            except ValueError as e:
                raise ValueError(f"task {task.name}: the {field} of example {i + 1} "
                                 f"({text[:60]!r}) cannot be encoded: {e}") from None
            longest[field] = max(longest[field], n)
    return longest["prompt"], longest["solution"]


def encode_prompts(exp: Experiment, examples) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Right-padded [B, P] prompt tokens (BOS + prompt) and their lengths."""
    toks, lens = exp.tokenizer.encode_batch([e.prompt for e in examples], exp.prompt_width,
                                            pad="right", add_bos=True)
    return jnp.asarray(toks, jnp.int32), jnp.asarray(lens, jnp.int32)


def completions(exp: Experiment, ro: R.Rollout) -> list[str]:
    """The responses' text as the reward sees it (``Tokenizer.decode_response``: a PAD, BOS or
    out-of-vocabulary token the policy sampled shows up as U+FFFD instead of vanishing)."""
    toks = D.to_host(ro.tokens)  # (sharded, possibly multi-host) -> numpy
    starts, lens = D.to_host(ro.prompt_lens), D.to_host(ro.response_lens)
    return [exp.tokenizer.decode_response(toks[b, starts[b]:starts[b] + lens[b]])
            for b in range(len(toks))]


def rollout_kernel_layout(config) -> bool | str:
    """Whether rollout params use the Pallas kernel layout (``rollout.kernel_layout``): per-layer
    params for every rollout (so no layer's expert weights are copied out of a stacked array
    before a Pallas call; the BF16 rollout's grouped matmuls are Pallas kernels on the GPU too)
    and, for FP4 rollouts, experts packed for the FP4 grouped matmul named by
    ``rollout.expert_kernel`` ("auto": the Mosaic GPU kernel where it fits, else the Triton one).
    False, or the kernel name: the one value both ``sync_weights`` and the rollout shardings
    follow, so their trees match."""
    if not config.rollout.kernel_layout:
        return False
    kernel = config.rollout.get("expert_kernel", "auto")
    if kernel not in M.EXPERT_KERNELS:
        raise ValueError(f"rollout.expert_kernel={kernel!r}: use 'auto', 'triton' or 'mosaic'")
    return kernel
