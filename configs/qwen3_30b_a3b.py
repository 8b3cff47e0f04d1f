"""The Qwen3-30B-A3B shape (random weights): 48 layers, hidden 2048, 32 query / 4 KV heads of 128,
128 experts top-8 of width 768, vocab 151,936. Used by the throughput benchmark."""

from configs import common


def get_config():
    c = common.base_config()
    c.model.update(
        vocab_size=151_936,
        d_model=2048,
        n_layers=48,
        n_heads=32,
        n_kv_heads=4,
        head_dim=128,
        n_experts=128,
        top_k=8,
        d_expert=768,
        d_shared=0,
        norm_topk_prob=True,
        rope_theta=1_000_000.0,
        max_seq_len=131_072 + 1024,
        param_dtype="bfloat16",
        scan_layers=True,  # 48 layers: training forwards as lax.scans (compile time)
    )
    c.numerics.hint_layers = "last_half"
    return c
