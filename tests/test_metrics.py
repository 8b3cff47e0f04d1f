"""Code statistics (trace_jax.metrics.code_stats) must stay exact past float32's 2**24 counts."""

import jax.numpy as jnp
import numpy as np

from trace_jax import metrics as MT
from trace_jax import quant as Q


def _exact_hint(bits_BxTxN2):
    return Q.Hint(bits=jnp.asarray(bits_BxTxN2), scales=jnp.zeros((1,), jnp.uint8),
                  global_scale=jnp.ones((), jnp.float32), fmt="nvfp4", axis=-1, kind="exact")


def test_code_stats_counts_past_float32_integer_range():
    B, T, N2 = 1, 4, (1 << 22) + 4096  # 2 * 4 * N2 > 2**25 codes, valid rows 3 of 4 (> 2**24)
    trainer = np.zeros((B, T, N2), np.uint8)  # every code +0
    rollout = trainer.copy()
    rollout[0, 1, :1000] = 0x01   # low nibble +0.5: 1000 codes one step away
    rollout[0, 2, :7] = 0x07      # low nibble +6: 7 codes seven steps away (+0 -> +6)
    rollout[0, 3, :50] = 0x11     # masked-out row: not counted
    valid = jnp.asarray([[True, True, True, False]])
    eq, tot, hist = MT.code_stats({"s": _exact_hint(trainer)}, {"s": _exact_hint(rollout)},
                                  valid, ["s"])
    n = 3 * 2 * N2
    assert n > (1 << 24)
    # one site: its exact int32 counts rounded once to float32 (float32 counting would stall)
    assert float(tot) == np.float32(n) and float(eq) == np.float32(n - 1007)
    expected = np.zeros(Q.MAX_CODE_DISTANCE + 1, np.float32)
    expected[0], expected[1], expected[7] = n - 1007, 1000, 7
    np.testing.assert_array_equal(np.asarray(hist), expected)
