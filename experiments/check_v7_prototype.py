import sys, zlib
sys.path.insert(0, "tests")
import jax, jax.numpy as jnp, numpy as np
from pallas_kernels import attention_triton as AT, kv_layout as KL
import test_kernels_attention as T
for fmt, hq, h, d, s, block_k, splits in [("nvfp4", 32, 4, 128, 96, 32, 3), ("mxfp4", 32, 4, 128, 96, 32, 3),
                                          ("nvfp4", 8, 2, 128, 88, 32, None), ("mxfp4", 32, 2, 256, 64, 32, 2),
                                          ("nvfp4", 4, 4, 64, 128, 64, 1)]:
    b = 3
    q, k, v = T._inputs(5, b, hq, h, s, d)
    lengths = jnp.asarray([1, s // 2 + 3, s], jnp.int32)
    kc, vc = T._cache(k, fmt), T._cache(v, fmt)
    kw = dict(sm_scale=d ** -0.5, block_k=block_k, num_splits=splits, out_dtype=jnp.float32, interpret=True)
    kwc, vwc, vtc = KL.to_kv_words(kc), KL.to_kv_words(vc), KL.to_vt(vc)
    o6 = AT.decode_attention_triton(q, kwc, vwc, lengths, **kw)
    o7 = AT.decode_attention_triton(q, kwc, vtc, lengths, **kw)
    want = T._np_attention(q, T.dequantize(kc), T.dequantize(vc), np.asarray(lengths), d ** -0.5)
    print(fmt, hq, h, d, s, "v6 vs np", T._rel(o6, want), "v7 vs np", T._rel(o7, want), "v7 vs v6", T._rel(o7, o6))
    for prec in ("bf16",):
        o7b = AT.decode_attention_triton(q, kwc, vtc, lengths, precision=prec, **kw)
        print("   bf16 P v7 vs np", T._rel(o7b, want))
