"""CPU-sized default config: runs end to end on a laptop CPU in seconds to minutes."""

import ml_collections


def get_config():
    c = ml_collections.ConfigDict()
    c.seed = 0  # PRNG seed for everything
    c.demo = ml_collections.ConfigDict()
    c.demo.tokens = 256  # activation rows in the numerics demo
    c.demo.hidden = 2048  # activation width (the Qwen3 MoE hidden size)
    c.demo.noise = 0.01  # relative trainer-vs-rollout noise in the demo
    return c
