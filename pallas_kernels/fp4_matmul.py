"""FP4 (NVFP4 / MXFP4) weight matmuls for Hopper: dense (decode GEMV .. prefill GEMM) and grouped MoE.

Shapes: M rows (tokens), K contraction, N output columns, E experts.

Public API (the model calls these):
  prepare_weights(w: QTensor[K,N] | QTensor[E,K,N], layout="kn") -> FP4Weights   at weight sync
  prepare_expert_weights(w: QTensor[E,K,N], kernel="auto") -> FP4Weights | MgpuWeights (the
      Triton or the Mosaic GPU grouped kernel's layout)
  fp4_matmul(x[M,K] bf16 | QTensor[M,K], w, backend=, cfg=) -> [M,N] bf16  (w: FP4Weights or
      dense MgpuWeights: the Triton or the Mosaic GPU kernel)
  fp4_grouped_matmul(x[M,K], w (E experts), group_sizes[E] int32, backend=, cfg=) -> [M,N] bf16
      (w in either layout)
  bf16_grouped_matmul(x[M,K], w bf16 [E,K,N], group_sizes) -> [M,N] bf16  (ragged_dot stand-in,
      differentiable: its backward is two grouped kernels)
  fp4_grouped_swiglu(x, w_gate, w_up, group_sizes) -> silu(x@gate) * (x@up)  (one fused kernel
      for Mosaic GPU weights, else two grouped matmuls)
  *_reference: pure-JAX versions with the same signatures (the CPU fallback).

Numerics contract: the reference dequantizes both operands to f32 (``quant.dequantize``) and runs
``jnp.dot`` / ``lax.ragged_dot`` with f32 accumulation, cast to bf16. The kernels use the fact that
``code * block_scale`` is exact in bf16 (an E2M1 code has 2 significant bits, an E4M3 scale 4, an
E8M0 scale 1): they feed exact bf16 weight values (and, for W4A4, exact bf16 activation values) to
a bf16 MMA with f32 accumulation and apply the weight's global scale and the activation's per-row
global scale to the f32 accumulator. They agree with the reference up to f32 summation order.

Kernel weight layout (``FP4Weights``, v2, see ``matmul_layout``): the 16 codes of one K block of
one column (a *unit*) live in two u32 words, bit-permuted at prepare time so the in-kernel decode
is 16 bit operations + 8 ``mul.bf16x2`` per unit. ``codes`` uint32 [.., 2, K/16, N] (layout "kn")
or [.., 2, N, K/16] ("nk"); ``scales`` one byte per unit [.., K/16, N] / [.., N, K/16]: the raw E4M3
byte (nvfp4) or, for mxfp4, a bf16 exponent byte ``e + 126 - shift`` (E8M0 byte e, repeated for the
two units of a 32-block: mxfp4 streams 4.5 bits/element like nvfp4, not 4.25); ``kscale`` f32
[.., 1, 1] = 2**shift, applied with ``global_scale`` to the f32 accumulator (nvfp4 shift = 8).
Limitations of the kernels (not the reference): mxfp4 blocks more than 2**126 below the tensor's
largest block scale flush to 0; E8M0 byte 255 (NaN) gives NaN for the whole unit.
Large M (>= ``PREFILL_M``) dense calls dequantize once to bf16 and use XLA's GEMM (compute bound:
there the decode per M tile costs more than one bf16 weight round trip).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp

from pallas_kernels.fp4_matmul_mgpu import MgpuWeights
from trace_jax import quant
from trace_jax.checks import check_group_sizes
from trace_jax.quant import QTensor

Backend = Literal["auto", "reference", "triton"]
Layout = Literal["kn", "nk"]
PREFILL_M = 256  # dense calls with at least this many rows: dequantize once + XLA bf16 GEMM
NV_SHIFT = 8  # nvfp4 kernel values are code * scale * 2**-8 (keeps S = scale * 2**118 in bf16)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["codes", "scales", "global_scale", "kscale"],
    meta_fields=["fmt", "layout"],
)
@dataclasses.dataclass(frozen=True)
class FP4Weights:
    """Packed FP4 weights in kernel layout. Leading dims (experts, stacked layers) are free."""

    codes: jax.Array  # uint32 [..., 2, K/16, N] ("kn") or [..., 2, N, K/16] ("nk")
    scales: jax.Array  # uint8 [..., K/16, N] / [..., N, K/16]: one byte per 16-code unit
    global_scale: jax.Array  # f32 [..., 1, 1]: the QTensor's global scale
    kscale: jax.Array  # f32 [..., 1, 1]: 2**shift undone in the kernel epilogue
    fmt: str
    layout: str = "kn"

    @property
    def shape(self) -> tuple[int, ...]:
        *lead, _, a, b = self.codes.shape
        k16, n = (a, b) if self.layout == "kn" else (b, a)
        return (*lead, 16 * k16, n)

    @property
    def block(self) -> int:
        return quant.get_format(self.fmt).block_size

    @property
    def nbytes(self) -> int:
        """Bytes streamed by the kernel (codes + unit scales), plus the per-tensor scalars."""
        return int(4 * self.codes.size + self.scales.size + 8 * self.global_scale.size)


def _t(a):
    return jnp.swapaxes(a, -1, -2)


def prepare_weights(w: QTensor, layout: Layout = "kn") -> FP4Weights:
    """Convert a weight ``QTensor`` with contraction axis -2 ([K,N] or [E,K,N]) to kernel layout.

    Runs once per weight sync (jittable). K must be a multiple of 32 (16 for nvfp4)."""
    from pallas_kernels import matmul_layout

    if w.axis != -2:
        raise ValueError(f"weights must be quantized along axis -2 (K), got axis={w.axis}")
    if w.codes.ndim not in (2, 3):
        raise ValueError(f"weights must be [K,N] or [E,K,N], got {w.shape}")
    if layout not in ("kn", "nk"):
        raise ValueError(f"unknown layout {layout!r}")
    g = w.global_scale.astype(jnp.float32)
    if g.shape[-2:] != (1, 1):
        raise ValueError(f"global scale must be per tensor / per expert, got shape {g.shape}")
    lead = w.codes.shape[:-2]
    g = jnp.broadcast_to(g, (*lead, 1, 1))
    k, n = w.shape[-2:]
    if k % 16:
        raise ValueError(f"K={k} must be a multiple of 16")
    nib = jnp.stack([w.codes & 15, w.codes >> 4], axis=-2)  # [..., K/2, 2, N]
    nib = nib.reshape(*lead, k // 16, 16, n)
    words = jnp.moveaxis(matmul_layout.pack_units(nib, axis=-2), 0, -3)  # [..., 2, K/16, N]
    sb = jax.lax.bitcast_convert_type(w.scales, jnp.uint8)
    if w.fmt == "nvfp4":
        ks = jnp.full((*lead, 1, 1), 2.0 ** NV_SHIFT, jnp.float32)
    else:
        e = sb.astype(jnp.int32)  # [..., K/32, N]
        finite = jnp.where(e == 255, 0, e)
        emax = jnp.max(finite, axis=(-1, -2), keepdims=True)
        sh = jnp.maximum(emax - 128, -126)
        b = jnp.clip(e + 126 - sh, 0, 254)
        b = jnp.where(e == 0, 0, jnp.where(e == 255, 255, b))
        sb = jnp.repeat(b.astype(jnp.uint8), 2, axis=-2)
        ks = jax.lax.bitcast_convert_type((sh + 127) << 23, jnp.float32)
    if layout == "nk":
        words, sb = _t(words), _t(sb)
    return FP4Weights(codes=words, scales=sb, global_scale=g, kscale=ks.astype(jnp.float32),
                      fmt=w.fmt, layout=layout)


ExpertKernel = Literal["auto", "triton", "mosaic"]


def mosaic_fits(fmt: str, k: int, n: int) -> bool:
    """Whether the Mosaic GPU grouped kernel (``fp4_matmul_mgpu``) takes [E, K, N] weights of
    this format: NVFP4, K and N multiples of 64."""
    from pallas_kernels import fp4_matmul_mgpu as MGPU

    return fmt == "nvfp4" and k % 64 == 0 and n % MGPU.ROWS == 0


def prepare_expert_weights(w: QTensor, kernel: ExpertKernel = "auto"):
    """Expert weights ``QTensor[E, K, N]`` (or [K, N]) in the layout of a grouped-matmul kernel,
    once per weight sync: ``"triton"`` -> :class:`FP4Weights` (the Pallas-Triton kernel, any
    format), ``"mosaic"`` -> ``fp4_matmul_mgpu.MgpuWeights`` (the Pallas Mosaic GPU kernel,
    1.54-1.65x the Triton one at the 30B decode shapes on an H200, session 15; NVFP4 with K, N
    multiples of 64), ``"auto"``: mosaic where it fits (:func:`mosaic_fits`), else triton.
    :func:`fp4_grouped_matmul` takes either."""
    if kernel not in ("auto", "triton", "mosaic"):
        raise ValueError(f"unknown expert kernel {kernel!r} (use 'auto', 'triton' or 'mosaic')")
    k, n = w.shape[-2:]
    fits = mosaic_fits(w.fmt, k, n)
    if kernel == "mosaic" and not fits:
        raise ValueError(f"the Mosaic GPU FP4 kernel takes nvfp4 weights with K, N multiples of "
                         f"64; got {w.fmt} [K={k}, N={n}] (use kernel 'triton' or 'auto')")
    if kernel == "triton" or not fits:
        return prepare_weights(w)
    from pallas_kernels import fp4_matmul_mgpu as MGPU

    return MGPU.prepare_mgpu(w)


def _is_mosaic(w) -> bool:
    return isinstance(w, MgpuWeights)


def weights_to_qtensor(w: FP4Weights) -> QTensor:
    """Inverse of :func:`prepare_weights` / :func:`prepare_expert_weights` (exact, except mxfp4
    scales the Triton layout flushes)."""
    from pallas_kernels import matmul_layout

    if _is_mosaic(w):
        from pallas_kernels import fp4_matmul_mgpu as MGPU

        return MGPU.mgpu_to_qtensor(w)
    f = quant.get_format(w.fmt)
    words, sb = (w.codes, w.scales) if w.layout == "kn" else (_t(w.codes), _t(w.scales))
    *lead, _, k16, n = words.shape
    nib = matmul_layout.unpack_units(jnp.moveaxis(words, -3, 0))  # [16, ..., K/16, N]
    nib = jnp.moveaxis(nib, 0, -2).reshape(*lead, 8 * k16, 2, n)
    codes = (nib[..., 0, :] | (nib[..., 1, :] << 4)).astype(jnp.uint8)
    if w.fmt == "mxfp4":
        sh = jnp.frexp(w.kscale)[1].astype(jnp.int32) - 1
        b = sb[..., ::2, :].astype(jnp.int32)
        e = jnp.where((b == 0) | (b == 255), b, b - 126 + sh)
        sb = jnp.clip(e, 0, 255).astype(jnp.uint8)
    return QTensor(
        codes=codes,
        scales=jax.lax.bitcast_convert_type(sb, f.scale_dtype),
        global_scale=w.global_scale,
        fmt=w.fmt,
        axis=-2,
    )


def dequantize_bf16(w: FP4Weights) -> jax.Array:
    """Exact bf16 weights ``code * block_scale * global_scale`` [..., K, N] (XLA); used by the
    prefill path. (GPU run 4 measured a variant built on the asm emulation 2x slower.)"""
    return quant.dequantize(weights_to_qtensor(w), jnp.float32).astype(jnp.bfloat16)


# --------------------------------------------------------------------------------------------
# References


def _x_parts(x) -> tuple[jax.Array, jax.Array]:
    """(f32 values, f32 per-row factor): a bf16 x and 1, or a W4A4 activation QTensor's exact
    ``code * block scale`` and its per-row global scale [M, 1] (what the kernels feed the MMA
    and apply to the accumulator)."""
    if isinstance(x, QTensor):
        if x.axis != -1:
            raise ValueError(f"activation QTensor must be quantized along K (axis -1), got {x.axis}")
        ones = dataclasses.replace(x, global_scale=jnp.ones_like(x.global_scale))
        g = jnp.broadcast_to(x.global_scale.astype(jnp.float32), x.global_scale.shape[:-1] + (1,))
        return quant.dequantize(ones, jnp.float32), g
    return x.astype(jnp.float32), jnp.ones((), jnp.float32)


def _w_parts(w: FP4Weights) -> tuple[jax.Array, jax.Array]:
    """(exact ``code * block scale`` f32 [..., K, N], global scale f32 [..., 1, 1])."""
    q = weights_to_qtensor(w)
    ones = dataclasses.replace(q, global_scale=jnp.ones_like(q.global_scale))
    return quant.dequantize(ones, jnp.float32), q.global_scale.astype(jnp.float32)


# The references compute what the Triton kernels compute, up to f32 summation order: exact
# ``code * block scale`` operands (bf16 holds them; f32 products of two are exact), an f32
# accumulator, then the activation's per-row global scale (W4A4; 1 otherwise) times the
# weight's on the accumulator before the one bf16 rounding (as do the Mosaic GPU kernels'
# references in ``fp4_matmul_mgpu``). The QAT trainer and the rollout's XLA path multiply
# the same way (``trace_jax.ops.ScaledExperts``).


def fp4_matmul_reference(x, w: FP4Weights, *, backend: Backend = "reference") -> jax.Array:
    del backend
    xf, gx = _x_parts(x)
    wf, gw = _w_parts(w)
    out = jnp.dot(xf, wf, preferred_element_type=jnp.float32,
                  precision=jax.lax.Precision.HIGHEST)
    return (out * (gx * gw.reshape(1, 1))).astype(jnp.bfloat16)


def fp4_grouped_matmul_reference(x, w: FP4Weights, group_sizes, *,
                                 backend: Backend = "reference") -> jax.Array:
    del backend
    xf, gx = _x_parts(x)
    wf, gw = _w_parts(w)
    gs = group_sizes.astype(jnp.int32)
    out = jax.lax.ragged_dot(xf, wf, gs, preferred_element_type=jnp.float32,
                             precision=jax.lax.Precision.HIGHEST)
    return (out * (gx * expert_rows(gw.reshape(-1), gs, out.shape[0]))).astype(jnp.bfloat16)


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


def check_operands(what: str, x, w, group_sizes=None) -> None:
    """ValueError unless x [M, K] (an array or a QTensor) contracts with w [..., K, N] and
    ``group_sizes`` has one entry per expert of w [E, K, N]: the kernels read K from x and the
    experts from ``group_sizes``, so a mismatch would read past w or drop part of it."""
    xs, ws = tuple(x.shape), tuple(w.shape)
    if len(xs) != 2 or xs[1] != ws[-2]:
        raise ValueError(f"{what}: x {xs} does not contract with the weight {ws} (x must be "
                         f"[M, K] with K = {ws[-2]})")
    if group_sizes is not None and tuple(jnp.shape(group_sizes)) != (ws[0],):
        raise ValueError(f"{what}: group_sizes of shape {tuple(jnp.shape(group_sizes))} for "
                         f"{ws[0]} experts (one size per expert of the [E, K, N] weight)")


def fp4_matmul(x, w: FP4Weights, *, backend: Backend = "auto", cfg=None) -> jax.Array:
    """x[M,K] (bf16, or QTensor along K) @ FP4 w[K,N] -> bf16 [M,N], f32 accumulation.

    M < PREFILL_M: the streaming decode kernel; larger M: exact bf16 dequantize + XLA GEMM.
    ``w``: :class:`FP4Weights` (:func:`prepare_weights`: the Pallas-Triton kernel) or
    ``MgpuWeights`` (``fp4_matmul_mgpu.prepare_mgpu``, NVFP4: the Mosaic GPU kernel, 1.5-1.6x the
    Triton one at M <= 8 on an H200, session 20; ``cfg`` = (tk, steps, splits) or None)."""
    if len(w.shape) != 2:
        raise ValueError(f"fp4_matmul wants a [K,N] weight, got {w.shape}")
    check_operands("fp4_matmul", x, w)
    if x.shape[0] == 0:  # (no rows: nothing for a kernel to tile)
        return jnp.zeros((0, w.shape[-1]), jnp.bfloat16)
    if not _use_kernel(backend):
        return fp4_matmul_reference(x, w)
    from pallas_kernels import matmul_triton

    m = x.codes.shape[0] if isinstance(x, QTensor) else x.shape[0]
    mosaic = _is_mosaic(w)
    if mosaic and cfg is not None and not (isinstance(cfg, tuple) and len(cfg) == 3):
        raise TypeError(f"Mosaic GPU weights take cfg=(tk, steps, splits) or None, got {cfg!r}")
    if mosaic and m < PREFILL_M:
        from pallas_kernels import fp4_matmul_mgpu as MGPU

        xb, g = matmul_triton.x_bf16(x)
        tk, steps, splits = cfg or (None, None, None)
        return MGPU.fp4_matmul_mgpu(xb, w, tk=tk, steps=steps,
                                    splits=splits, backend="mgpu",
                                    row_scale=g if isinstance(x, QTensor) else None)
    if (cfg is None or mosaic) and m >= PREFILL_M:  # (a Mosaic cfg does not apply here)
        xb, g = matmul_triton.x_bf16(x)
        if not mosaic and matmul_triton.planes_fit(w):  # one Pallas pass, rows plane-major
            wb = matmul_triton.dequantize_planes(w)
            xb = matmul_triton.permute_x(xb, matmul_triton.PLANES_BK)
        else:
            wb = dequantize_bf16(dataclasses.replace(w, global_scale=jnp.ones_like(w.global_scale)))
        out = jnp.dot(xb, wb, preferred_element_type=jnp.float32)
        return (out * (g * w.global_scale.reshape(1, 1))).astype(jnp.bfloat16)
    return matmul_triton.dense(x, w, cfg)


def fp4_grouped_matmul(x, w: FP4Weights, group_sizes, *, backend: Backend = "auto",
                       cfg=None) -> jax.Array:
    """Rows of x sorted by expert (``group_sizes[E]`` int32, zeros allowed); rows past
    sum(group_sizes) give zeros. x bf16 [M,K] or an activation QTensor (W4A4); ``w`` in either
    kernel layout (:func:`prepare_expert_weights`): the Triton or the Mosaic GPU kernel."""
    if len(w.shape) != 3:
        raise ValueError(f"fp4_grouped_matmul wants an [E,K,N] weight, got {w.shape}")
    check_operands("fp4_grouped_matmul", x, w, group_sizes)
    check_group_sizes(group_sizes)
    if x.shape[0] == 0:
        return jnp.zeros((0, w.shape[-1]), jnp.bfloat16)
    if not _use_kernel(backend):
        return fp4_grouped_matmul_reference(x, w, group_sizes)
    from pallas_kernels import matmul_triton

    if _is_mosaic(w):
        from pallas_kernels import fp4_matmul_mgpu as MGPU

        xb, rs, mp, tk, steps = _mosaic_grouped_args(x, cfg)
        return MGPU.fp4_grouped_matmul_mgpu(xb, w, group_sizes, mp=mp, tk=tk, steps=steps,
                                            row_scale=rs, backend="mgpu")
    return matmul_triton.grouped(x, w, group_sizes, cfg)


def _mosaic_grouped_args(x, cfg):
    """(bf16 x, its per-row global scale or None, mp, tk, steps) for the Mosaic GPU grouped
    kernels: a W4A4 activation QTensor becomes its exact ``code * block scale`` bf16 values and
    its global scale per row; ``cfg`` is (mp, tk, steps) or None
    (``fp4_matmul_mgpu.default_grouped_knobs``)."""
    from pallas_kernels import matmul_triton

    if cfg is not None and not (isinstance(cfg, tuple) and len(cfg) == 3):
        raise TypeError(f"Mosaic GPU weights take cfg=(mp, tk, steps) or None, got {cfg!r}")
    xb, g = matmul_triton.x_bf16(x)
    return (xb, g if isinstance(x, QTensor) else None, *(cfg or (None, None, None)))


def bf16_kernel_fits(k: int, n: int) -> bool:
    """Whether the bf16 grouped kernel and its backward tile an [E,K,N] weight."""
    return k % 64 == 0 and n % 64 == 0


def bf16_grouped_matmul(x, w, group_sizes, *, backend: Backend = "auto", cfg=None,
                        expert_scale=None) -> jax.Array:
    """``jax.lax.ragged_dot`` replacement for bf16 expert weights w[E,K,N] (same item kernel).
    ``expert_scale`` (f32 [E], not differentiated) multiplies expert e's f32 accumulator before
    the bf16 rounding: the FP4 kernels' global scale, for weights given as their exact
    ``code * block scale`` (``trace_jax.ops.ScaledExperts``).

    Differentiable in x and w: on the kernel path a custom VJP runs the backward as two more
    grouped kernels, ``dx = dy @ w[e]^T`` (the forward kernel reading w transposed in place) and
    ``dw[e] = x_e^T @ dy_e`` (``matmul_triton.grouped_bf16_wgrad``), instead of the dense masked
    expansion XLA's GPU backend gives ``ragged_dot``'s gradient ([E, M, K] intermediates).
    Weights the kernels do not tile (``bf16_kernel_fits``) take ``ragged_dot``. Reverse mode
    only: a custom VJP has no forward-mode (jvp) rule."""
    check_operands("bf16_grouped_matmul", x, w, group_sizes)
    check_group_sizes(group_sizes)
    gs = group_sizes.astype(jnp.int32)
    if not _use_kernel(backend) or not bf16_kernel_fits(*w.shape[-2:]):
        out = jax.lax.ragged_dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), gs,
                                 preferred_element_type=jnp.float32)
        if expert_scale is not None:
            out = out * expert_rows(jax.lax.stop_gradient(expert_scale), gs, out.shape[0])
        return out.astype(jnp.bfloat16)
    if expert_scale is None:
        return _bf16_gmm(cfg, x, w, gs)
    return _bf16_gmm_scaled(cfg, x, w, gs, jax.lax.stop_gradient(expert_scale))


def expert_rows(expert_scale, group_sizes, m: int) -> jax.Array:
    """f32 [m, 1]: each row's expert's entry of ``expert_scale`` [E] (rows sorted by expert,
    ``group_sizes`` rows each; rows past the groups take the last expert's, their products
    being zero)."""
    from pallas_kernels import matmul_triton

    e = expert_scale.shape[0]
    re, _ = matmul_triton._row_expert(group_sizes, m)
    return expert_scale.astype(jnp.float32).reshape(e)[re][:, None]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _bf16_gmm(cfg, x, w, group_sizes):
    from pallas_kernels import matmul_triton

    return matmul_triton.grouped_bf16(x, w, group_sizes, cfg)


def _bf16_gmm_fwd(cfg, x, w, group_sizes):
    return _bf16_gmm(cfg, x, w, group_sizes), (x, w, group_sizes)


def _bf16_gmm_bwd(cfg, res, dy):
    from pallas_kernels import matmul_triton

    del cfg  # the forward's tiles; the backward picks its own for its shapes
    x, w, group_sizes = res
    dx = matmul_triton.grouped_bf16(dy, w, group_sizes, w_layout="nk")
    dw = matmul_triton.grouped_bf16_wgrad(x, dy, group_sizes)
    return dx.astype(x.dtype), dw.astype(w.dtype), None


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _bf16_gmm_scaled(cfg, x, w, group_sizes, expert_scale):
    from pallas_kernels import matmul_triton

    return matmul_triton.grouped_bf16(x, w, group_sizes, cfg, expert_scale=expert_scale)


def _bf16_gmm_scaled_fwd(cfg, x, w, group_sizes, expert_scale):
    return (_bf16_gmm_scaled(cfg, x, w, group_sizes, expert_scale),
            (x, w, group_sizes, expert_scale))


def _bf16_gmm_scaled_bwd(cfg, res, dy):
    """y = s_e * (x @ w[e]): dx = s_e * (dy @ w[e]^T) with the scale on the backward kernel's
    accumulator, dw[e] = s_e * (x_e^T @ dy_e) on the f32 weight gradient (no extra rounding of
    dy)."""
    from pallas_kernels import matmul_triton

    del cfg
    x, w, group_sizes, expert_scale = res
    dx = matmul_triton.grouped_bf16(dy, w, group_sizes, w_layout="nk", expert_scale=expert_scale)
    dw = matmul_triton.grouped_bf16_wgrad(x, dy, group_sizes)
    dw = dw * expert_scale.astype(jnp.float32)[:, None, None]
    return dx.astype(x.dtype), dw.astype(w.dtype), None, jnp.zeros_like(expert_scale)


_bf16_gmm_scaled.defvjp(_bf16_gmm_scaled_fwd, _bf16_gmm_scaled_bwd)
_bf16_gmm.defvjp(_bf16_gmm_fwd, _bf16_gmm_bwd)


def bf16_grouped_matmul_wgrad_reference(x, dy, group_sizes) -> jax.Array:
    """f32 [E,K,N] weight gradient of ``ragged_dot(x, w, group_sizes)`` for cotangent ``dy``,
    from XLA's own transpose of ``ragged_dot`` (f32 operands)."""
    e, k, n = group_sizes.shape[0], x.shape[1], dy.shape[1]
    gs = group_sizes.astype(jnp.int32)
    f = lambda w: jax.lax.ragged_dot(x.astype(jnp.float32), w, gs,  # noqa: E731
                                     precision=jax.lax.Precision.HIGHEST)
    _, vjp = jax.vjp(f, jnp.zeros((e, k, n), jnp.float32))
    return vjp(dy.astype(jnp.float32))[0]


def fp4_grouped_swiglu(x, w_gate: FP4Weights, w_up: FP4Weights, group_sizes, *,
                       backend: Backend = "auto", cfg=None, fused: bool | None = None) -> jax.Array:
    """silu(x @ gate) * (x @ up) per expert, bf16 out: the two bf16 products, SwiGLU in f32.
    Mosaic GPU weights on the kernel path with ``fused`` (None:
    ``fp4_matmul_mgpu.FUSED_SWIGLU``): one kernel streams both weights and applies the SwiGLU
    in its epilogue (``fp4_matmul_mgpu.fp4_grouped_swiglu_mgpu``); otherwise two grouped
    matmuls."""
    if tuple(w_gate.shape) != tuple(w_up.shape):
        raise ValueError(f"fp4_grouped_swiglu: gate {tuple(w_gate.shape)} and up "
                         f"{tuple(w_up.shape)} weights differ in shape")
    check_operands("fp4_grouped_swiglu", x, w_gate, group_sizes)
    check_group_sizes(group_sizes)
    if _use_kernel(backend) and _is_mosaic(w_gate) and _is_mosaic(w_up):
        from pallas_kernels import fp4_matmul_mgpu as MGPU

        if MGPU.FUSED_SWIGLU if fused is None else fused:
            xb, rs, mp, tk, steps = _mosaic_grouped_args(x, cfg)
            return MGPU.fp4_grouped_swiglu_mgpu(xb, w_gate, w_up, group_sizes, mp=mp, tk=tk,
                                                steps=steps, row_scale=rs, backend="mgpu")
    g = fp4_grouped_matmul(x, w_gate, group_sizes, backend=backend, cfg=cfg).astype(jnp.float32)
    u = fp4_grouped_matmul(x, w_up, group_sizes, backend=backend, cfg=cfg).astype(jnp.float32)
    return (jax.nn.silu(g) * u).astype(jnp.bfloat16)
