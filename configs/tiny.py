"""CPU-sized default config: the whole pipeline runs on a 2-core CPU in minutes.

``python -m trace_jax.main --config=configs/tiny.py``
"""

import ml_collections

from configs import common


def get_config():
    c = common.base_config()
    c.model.update(
        vocab_size=60,  # the char tokenizer's vocabulary
        d_model=64,  # residual width (a multiple of the FP4 block sizes 16/32)
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        head_dim=32,
        n_experts=8,
        top_k=2,
        d_expert=64,
        d_shared=0,
        max_seq_len=64,
        rope_theta=10_000.0,
    )
    c.workdir = "runs/tiny"
    # one-digit addition, "7+8=" -> "15": SFT leaves it at ~40-60% accuracy, GRPO raises it to ~80%
    # in 300 steps (2-core CPU, ~3.5 minutes in all)
    c.task.kwargs = ml_collections.ConfigDict(dict(digits=1))
    c.rollout.update(batch_prompts=16, group_size=8, max_new_tokens=5)
    c.sft.update(steps=120, batch_size=64, lr=3e-3, warmup_steps=10)
    c.train.update(steps=300, lr=5e-4, warmup_steps=2)
    c.checkpoint.update(every=100, keep=2)
    return c
