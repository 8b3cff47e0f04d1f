"""CPU-sized default config: the whole pipeline runs on a 2-core CPU in minutes.

``python -m trace_jax.main --config=configs/tiny.py``
"""

import ml_collections

from configs import common


def get_config():
    c = common.base_config()
    c.model.update(
        vocab_size=64,  # >= the char tokenizer's vocabulary
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
    # Numerics demo run by trace_jax.main until the RL loop lands.
    c.demo = ml_collections.ConfigDict(dict(tokens=256, hidden=2048, noise=0.01))
    return c
