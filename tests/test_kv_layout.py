"""The v5 K-cache word layout (pallas_kernels.kv_layout): a bijection on each 32-bit word whose
pairs, decoded as the kernel's asm does (emulated here), are the natural layout's even / odd
head-dim codes; QTensor functions refuse codes in that layout; appends into such a cache equal
quantizing the whole tensor and converting once."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels import kv_layout as KL
from pallas_kernels.kv_append import append_kv, empty_cache
from trace_jax import quant as Q


def _codes_of_pattern(p16):
    """bf16 decode pattern (magnitude bits 8..6, sign bit 15) -> E2M1 code."""
    return ((p16 >> 6) & 7) | ((p16 >> 12) & 8)


def test_every_bit_used_once_and_round_trip():
    tab = KL.source_bits()
    assert sorted(tab.ravel().tolist()) == list(range(32))
    rng = np.random.default_rng(0)
    codes = jnp.asarray(rng.integers(0, 256, (3, 7, 64), dtype=np.uint8))
    w = KL.to_words(codes)
    assert w.shape == codes.shape and w.dtype == jnp.uint8
    assert not np.array_equal(np.asarray(w), np.asarray(codes))  # a real permutation
    np.testing.assert_array_equal(np.asarray(KL.from_words(w)), np.asarray(codes))


def test_decoded_pairs_are_the_natural_even_and_odd_codes():
    """Rotations / masks / the hole multiply of the asm (emulated) on converted words give, per
    word j, the codes of dims 8j, 8j+2, 8j+4, 8j+6 ("lo") and 8j+1, ..+7 ("hi"), with no bit
    outside the bf16 pattern (which would change the decoded value)."""
    rng = np.random.default_rng(1)
    nat = rng.integers(0, 256, (40, 64), dtype=np.uint8)
    w = jax.lax.bitcast_convert_type(KL.to_words(jnp.asarray(nat)).reshape(40, 16, 4), jnp.uint32)
    pairs = [np.asarray(p) for p in KL.emulate_pairs(w)]
    for p in pairs:
        assert not (p & ~np.uint32(KL.P_MASK)).any()
    halves = [[p & 0xFFFF, p >> 16] for p in pairs]
    lo = np.stack(halves[0] + halves[1], -1).reshape(40, 64)
    hi = np.stack(halves[2] + halves[3], -1).reshape(40, 64)
    np.testing.assert_array_equal(_codes_of_pattern(lo), nat & 15)
    np.testing.assert_array_equal(_codes_of_pattern(hi), nat >> 4)


def test_qtensor_functions_refuse_the_word_layout():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 64))
    q = Q.quantize(x, "nvfp4", axis=-1, global_scope="row")
    kw = KL.to_kv_words(q)
    assert kw.layout == KL.LAYOUT and KL.to_kv_words(kw) is kw
    for fn in (Q.dequantize, Q.extract_hint, Q.unpacked_codes):
        with pytest.raises(ValueError, match="kv_words"):
            fn(kw)
    back = KL.to_natural(kw)
    assert back.layout == "natural"
    np.testing.assert_array_equal(np.asarray(Q.dequantize(back)), np.asarray(Q.dequantize(q)))
    with pytest.raises(ValueError, match="axis -1"):
        KL.to_kv_words(dataclasses.replace(q, axis=-2))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4"])
def test_append_into_a_word_layout_cache(fmt):
    b, h, s, d = 2, 2, 6, 64
    x = jax.random.normal(jax.random.PRNGKey(3), (b, h, s, d)) * 3
    cache = empty_cache((b, h, s, d), fmt, layout=KL.LAYOUT)
    append = jax.jit(append_kv)
    for t in range(0, s, 3):
        cache = append(cache, x[:, :, t:t + 3], jnp.full((b,), t, jnp.int32))
    want = KL.to_kv_words(Q.quantize(x, fmt, axis=-1, global_scope="row"))
    assert cache.layout == KL.LAYOUT
    for got, exp in zip(jax.tree.leaves(cache), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(exp))
