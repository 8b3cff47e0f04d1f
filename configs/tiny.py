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
    # "47+85=" -> "231": the sum written lowest digit first, which a small transformer learns fast
    c.task.kwargs = ml_collections.ConfigDict(dict(digits=2, reverse=True))
    c.rollout.update(batch_prompts=16, group_size=4, max_new_tokens=5)
    c.sft.update(steps=150, batch_size=64, lr=3e-3, warmup_steps=10)
    c.train.update(steps=40, lr=3e-4, warmup_steps=2)
    c.checkpoint.update(every=25, keep=2)
    return c
