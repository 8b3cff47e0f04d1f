"""FP4 (NVFP4 / MXFP4) weight matmuls for Hopper: dense (decode GEMV .. prefill GEMM) and grouped MoE.

Shapes: M rows (tokens), K contraction, N output columns, E experts.

Public API (the model calls these):
  prepare_weights(w: QTensor[K,N] | QTensor[E,K,N]) -> FP4Weights      once, at weight-sync time
  fp4_matmul(x[M,K] bf16 | QTensor[M,K], w, backend=) -> [M,N] bf16
  fp4_grouped_matmul(x[M,K], w (E experts), group_sizes[E] int32, backend=) -> [M,N] bf16
  fp4_grouped_swiglu(x, w_gate, w_up, group_sizes) -> silu(x@gate) * (x@up)  (unfused composition)
  *_reference: pure-JAX versions with the same signatures (the CPU fallback).

Numerics contract: the reference dequantizes both operands to f32 (``quant.dequantize``) and runs
``jnp.dot`` / ``lax.ragged_dot`` with f32 accumulation, cast to bf16. The kernels use the fact that
``code * block_scale`` is exact in bf16 (an E2M1 code has 2 significant bits, an E4M3 scale 4, an
E8M0 scale 1): they feed exact bf16 weight values (and, for W4A4, exact bf16 activation values) to
a bf16 MMA with f32 accumulation and apply the weight's global scale and the activation's per-row
global scale to the f32 accumulator. They agree with the reference up to f32 summation order.

Kernel weight layout (``FP4Weights``): codes ``uint8 [.., K/2, N]`` two codes per byte along K
(element 2i in the low nibble, as ``QTensor``), block scales as raw bytes ``uint8 [.., K/B, N]``,
global scales ``f32 [.., 1, 1]``. The kernel splits x into its even and odd K columns so that the
low and high nibbles of one byte feed two MMAs without any shuffle of the weight.
Limitation of the kernels (not the reference): MXFP4 block scales >= 2**114 are not supported
(the decode folds 2**14 into the scale exponent), and E8M0 byte 255 (NaN) decodes as Inf.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp

from trace_jax import quant
from trace_jax.quant import QTensor

Backend = Literal["auto", "reference", "triton"]


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["codes", "scales", "global_scale"],
    meta_fields=["fmt"],
)
@dataclasses.dataclass(frozen=True)
class FP4Weights:
    """Packed FP4 weights in kernel layout. Leading dims (experts, stacked layers) are free."""

    codes: jax.Array  # uint8 [..., K/2, N]
    scales: jax.Array  # uint8 [..., K/B, N]: raw E4M3 (nvfp4) or E8M0 (mxfp4) bytes
    global_scale: jax.Array  # f32 [..., 1, 1]
    fmt: str

    @property
    def shape(self) -> tuple[int, ...]:
        *lead, k2, n = self.codes.shape
        return (*lead, 2 * k2, n)

    @property
    def block(self) -> int:
        return quant.get_format(self.fmt).block_size

    @property
    def nbytes(self) -> int:
        return int(self.codes.size + self.scales.size + 4 * self.global_scale.size)


def prepare_weights(w: QTensor) -> FP4Weights:
    """Convert a weight ``QTensor`` with contraction axis -2 ([K,N] or [E,K,N]) to kernel layout."""
    if w.axis != -2:
        raise ValueError(f"weights must be quantized along axis -2 (K), got axis={w.axis}")
    if w.codes.ndim not in (2, 3):
        raise ValueError(f"weights must be [K,N] or [E,K,N], got {w.shape}")
    g = w.global_scale.astype(jnp.float32)
    if g.shape[-2:] != (1, 1):
        raise ValueError(f"global scale must be per tensor / per expert, got shape {g.shape}")
    g = jnp.broadcast_to(g, (*w.codes.shape[:-2], 1, 1))
    scales = jax.lax.bitcast_convert_type(w.scales, jnp.uint8)
    return FP4Weights(codes=w.codes, scales=scales, global_scale=g, fmt=w.fmt)


def weights_to_qtensor(w: FP4Weights) -> QTensor:
    """Inverse of :func:`prepare_weights` (round-trip check, reference path)."""
    f = quant.get_format(w.fmt)
    return QTensor(
        codes=w.codes,
        scales=jax.lax.bitcast_convert_type(w.scales, f.scale_dtype),
        global_scale=w.global_scale,
        fmt=w.fmt,
        axis=-2,
    )


# --------------------------------------------------------------------------------------------
# References


def _x_f32(x) -> jax.Array:
    if isinstance(x, QTensor):
        if x.axis != -1:
            raise ValueError(f"activation QTensor must be quantized along K (axis -1), got {x.axis}")
        return quant.dequantize(x, jnp.float32)
    return x.astype(jnp.float32)


def fp4_matmul_reference(x, w: FP4Weights, *, backend: Backend = "reference") -> jax.Array:
    del backend
    wf = quant.dequantize(weights_to_qtensor(w), jnp.float32)
    out = jnp.dot(_x_f32(x), wf, preferred_element_type=jnp.float32,
                  precision=jax.lax.Precision.HIGHEST)
    return out.astype(jnp.bfloat16)


def fp4_grouped_matmul_reference(x, w: FP4Weights, group_sizes, *,
                                 backend: Backend = "reference") -> jax.Array:
    del backend
    wf = quant.dequantize(weights_to_qtensor(w), jnp.float32)
    out = jax.lax.ragged_dot(_x_f32(x), wf, group_sizes.astype(jnp.int32),
                             preferred_element_type=jnp.float32,
                             precision=jax.lax.Precision.HIGHEST)
    return out.astype(jnp.bfloat16)


# --------------------------------------------------------------------------------------------
# Dispatch


def _use_kernel(backend: Backend) -> bool:
    if backend == "reference":
        return False
    if backend == "triton":
        return True
    if backend == "auto":
        return jax.default_backend() == "gpu"
    raise ValueError(f"unknown backend {backend!r}")


def fp4_matmul(x, w: FP4Weights, *, backend: Backend = "auto", **cfg) -> jax.Array:
    """x[M,K] (bf16, or QTensor along K) @ FP4 w[K,N] -> bf16 [M,N], f32 accumulation."""
    if w.codes.ndim != 2:
        raise ValueError(f"fp4_matmul wants a [K,N] weight, got {w.shape}")
    if not _use_kernel(backend):
        return fp4_matmul_reference(x, w)
    from pallas_kernels import matmul_triton

    return matmul_triton.dense(x, w, **cfg)


def fp4_grouped_matmul(x, w: FP4Weights, group_sizes, *, backend: Backend = "auto",
                       **cfg) -> jax.Array:
    """Rows of x sorted by expert; rows past sum(group_sizes) give zeros."""
    if w.codes.ndim != 3:
        raise ValueError(f"fp4_grouped_matmul wants an [E,K,N] weight, got {w.shape}")
    if not _use_kernel(backend):
        return fp4_grouped_matmul_reference(x, w, group_sizes)
    from pallas_kernels import matmul_triton

    return matmul_triton.grouped(x, w, group_sizes, **cfg)


def fp4_grouped_swiglu(x, w_gate: FP4Weights, w_up: FP4Weights, group_sizes, *,
                       backend: Backend = "auto", **cfg) -> jax.Array:
    """silu(x @ gate) * (x @ up) per expert, bf16 out (unfused: two grouped matmuls)."""
    g = fp4_grouped_matmul(x, w_gate, group_sizes, backend=backend, **cfg).astype(jnp.float32)
    u = fp4_grouped_matmul(x, w_up, group_sizes, backend=backend, **cfg).astype(jnp.float32)
    return (jax.nn.silu(g) * u).astype(jnp.bfloat16)
