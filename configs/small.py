"""GPU experiment config: a ~150M-parameter MoE (16 experts, top-4) for the reproduction studies."""

from configs import common


def get_config():
    c = common.base_config()
    c.model.update(
        vocab_size=60,
        d_model=512,
        n_layers=8,
        n_heads=8,
        n_kv_heads=2,
        head_dim=64,
        n_experts=16,
        top_k=4,
        d_expert=1024,
        d_shared=0,
        max_seq_len=256,
    )
    return c
