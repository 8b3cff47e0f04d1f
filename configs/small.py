"""GPU experiment config: a ~207M-parameter MoE (16 experts, top-4) for the reproduction studies."""

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
    c.workdir = "runs/small"
    # two-digit addition; SFT warm start long enough that sampled accuracy is inside (0, 1)
    # (experiments/calibrate_sft.py measures it), then GRPO with 16 prompts x 8 samples per step
    c.rollout.update(batch_prompts=16, group_size=8, max_new_tokens=6)
    c.sft.update(steps=250, batch_size=64, lr=1e-3, warmup_steps=10)  # sampled acc ~0.16 (H200)
    c.train.update(steps=200, lr=2e-4, warmup_steps=5)
    c.checkpoint.update(every=100, keep=2)
    return c
