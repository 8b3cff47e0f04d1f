"""The register cap for Mosaic GPU kernels (``pallas_kernels.mgpu_regcap``): a capped grouped
kernel reaches the serialized module outlined, its ``gpu.func`` carrying ``nvvm.maxnreg`` and
taking what Mosaic's own outlining passes (raw pointers and the TMA descriptors); uncapped
kernels are untouched; bad caps are refused by name. (That the GPU-to-NVVM conversion keeps the
attribute, which jaxlib's Python MLIR cannot run, that ptxas honours the cap, and that the values
stay bit for bit are the GPU run's: ``gpu_session55a.sh``.)"""

import collections

import jax
import jax.numpy as jnp
import pytest

from pallas_kernels import fp4_matmul_mgpu as FM
from pallas_kernels import mgpu_regcap as R

E, K, N = 2, 768, 192


@pytest.fixture(scope="module")
def grouped_inputs():
    from trace_jax.quant import quantize
    w = FM.prepare_mgpu(quantize(jax.random.normal(jax.random.PRNGKey(7), (E, K, N)), "nvfp4",
                                 axis=-2, global_scope="tensor"))
    x = jax.random.normal(jax.random.PRNGKey(9), (23, K), jnp.bfloat16)
    return w, x, jnp.array([3, 20], jnp.int32)


def kernel_modules(lowered) -> list[tuple[collections.Counter, dict]]:
    """For each Mosaic GPU custom call of a lowered computation, the module it carries (as
    serialized: op names under the ``stable_mosaic_gpu.`` prefix, which is stripped here):
    (a count of its op names, {gpu.func name: its attributes as text})."""
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import mosaic_gpu_dialect
    from jaxlib.mlir import ir

    blobs = [ir.StringAttr(ir.DictAttr(op.attributes["mhlo.backend_config"])["module"])
             .value_bytes for op in R.walk_ops(lowered.compiler_ir("stablehlo").operation)
             if op.name == "stablehlo.custom_call"
             and ir.StringAttr(op.attributes["call_target_name"]).value.startswith("mosaic_gpu")]
    out = []
    for blob in blobs:
        with jmlir.make_ir_context() as ctx:
            mosaic_gpu_dialect.register_dialect(ctx)
            ctx.allow_unregistered_dialects = True
            mod = ir.Module.parse(blob)
            ops = [op.operation for op in R.walk_ops(mod.operation)]
            name = lambda op: op.name.removeprefix("stable_mosaic_gpu.")  # noqa: E731
            funcs = {ir.StringAttr(op.attributes["sym_name"]).value:
                     {a: str(op.attributes[a]) for a in op.attributes}
                     for op in ops if name(op) == "gpu.func"}
            out.append((collections.Counter(map(name, ops)), funcs))
    return out


def _lower(f, *args):
    return jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))


def test_capped_grouped_kernels_are_outlined_with_maxnreg_and_uncapped_ones_untouched(
        grouped_inputs, monkeypatch):
    w, x, gs = grouped_inputs
    one = lambda regs: lambda x, g: FM.fp4_grouped_matmul_mgpu(  # noqa: E731
        x, w, g, backend="mgpu", mp=16, tk=128, steps=3, regs=regs)
    pair = lambda regs: lambda x, g: FM.fp4_grouped_swiglu_mgpu(  # noqa: E731
        x, w, w, g, backend="mgpu", mp=16, tk=128, steps=3, regs=regs)
    for f in (one, pair):
        [(ops, funcs)] = kernel_modules(_lower(f(168), x, gs))
        assert ops["gpu.launch"] == 0 and ops["gpu.launch_func"] == 1, ops
        [(kname, attrs)] = funcs.items()
        assert kname.startswith("body_maxnreg168")  # (profiles match kernels by "body")
        assert attrs["nvvm.maxnreg"] == "168 : i32" and "kernel" in attrs
        # the memref descriptors were sunk into the kernel, as Mosaic's C++ pipeline does: it
        # takes pointers (x, out, the group tables, ...) and one byval array of TMA descriptors
        # (the 4 + 1 parameters of session 49's PTX for one weight), not descriptor structs
        params = attrs["function_type"].split(" -> ")[0].strip("()").split(", ")
        assert params[-1].startswith("!llvm.array<") and set(params[:-1]) == {"!llvm.ptr"}
        assert len(params) == (6 if f is pair else 5), params
        [(ops0, funcs0)] = kernel_modules(_lower(f(0), x, gs))
        assert ops0["gpu.launch"] == 1 and ops0["gpu.launch_func"] == 0 and not funcs0
        # the same kernel body: as many inline-asm blocks (the decode, wgmma) and TMA copies
        for op in ("llvm.inline_asm", "nvvm.cp.async.bulk.tensor.shared.cluster.global"):
            assert ops[op] == ops0[op] > 0, (op, ops[op], ops0[op])
    # the module knob, read at trace time (a new jit), and the argument overriding it
    monkeypatch.setattr(FM, "GROUPED_REGS", 160)
    [(_, funcs)] = kernel_modules(_lower(one(None), x, gs))
    assert [a["nvvm.maxnreg"] for a in funcs.values()] == ["160 : i32"]
    [(ops, funcs)] = kernel_modules(_lower(one(0), x, gs))
    assert ops["gpu.launch"] == 1 and not funcs


def test_bad_caps_are_refused_by_name(grouped_inputs, monkeypatch):
    w, x, gs = grouped_inputs
    for bad in (100, 16, 256, -8):
        with pytest.raises(ValueError, match=f"regs={bad}"):
            FM.fp4_grouped_matmul_mgpu(x, w, gs, mp=16, backend="emulate", regs=bad)
    monkeypatch.setattr(FM, "GROUPED_REGS", 7)
    with pytest.raises(ValueError, match="regs=7"):
        FM.fp4_grouped_swiglu_mgpu(x, w, w, gs, mp=16, backend="emulate")
    monkeypatch.setattr(FM, "GROUPED_REGS", 0)
    assert R.requested_regs(R.capped_name("body", 168)) == 168
    assert R.capped_name("body", 0) is None and R.requested_regs("body") == 0
    assert R.requested_regs("body_maxnreg168_x") == 0  # (only a trailing tag counts)


def test_cap_module_refuses_a_module_without_a_launch():
    from jaxlib.mlir import ir
    with ir.Context(), ir.Location.unknown():
        with pytest.raises(ValueError, match="no gpu.launch"):
            R.cap_module(ir.Module.create(), 168)
