"""A per-thread register cap for Pallas Mosaic GPU kernels (``.maxnreg`` in the kernel's PTX).

jax 0.11.2 offers no way to cap a Mosaic GPU kernel's registers: its C++ pipeline outlines the
``gpu.launch`` that the Python side builds into a ``gpu.func`` without copying any attribute,
then marks every kernel ``.minnctapersm 1`` (NOTES_matmul "Session 49"). So ptxas gives the
grouped FP4 kernel 204-255 registers a thread and an SM holds 2 of its 128-thread CTAs, whatever
their shared memory allows.

What this module does: a kernel whose name carries a cap (:func:`capped_name`, e.g.
``body_maxnreg168``) is outlined here, in Python, before its module is serialized, and its
``gpu.func`` gets ``nvvm.maxnreg``. The outlining repeats what the C++ pipeline does first
(jaxlib 0.11.2's ``custom_call.cc``): ``canonicalize``, Mosaic's
``mosaic-gpu-sink-memref-descriptors`` (not registered in Python: :func:`sink_descriptors`
does the same), ``gpu-kernel-outlining``; it leaves out ``arith-expand`` and the trivial-location
pass, which the C++ pipeline still runs on the outlined module. So the kernel takes the same
parameters as uncapped (raw pointers and the TMA descriptors). The GPU-to-NVVM conversion copies
``nvvm.maxnreg`` to the ``llvm.func`` and LLVM writes ``.maxnreg N``; the C++ outlining finds no
``gpu.launch`` left. Kernels without a cap in their name are passed through untouched.

The hook is installed on first use (:func:`install`) by wrapping
``jax.experimental.mosaic.gpu.core._mosaic_gpu_lowering_rule``, a private function of the pinned
jax 0.11.2, which Pallas' Mosaic GPU calls look up at call time (kernels lowered through
``mosaic_gpu_p``'s registered rule are not capped); if jax moves it, :func:`install` fails
naming it instead of leaving kernels uncapped.
"""

from __future__ import annotations

import re

_TAG = "_maxnreg"
_NAME = re.compile(rf"{_TAG}(\d+)$")
_installed = False


def check_regs(regs: int) -> int:
    """``regs`` if it is 0 (no cap) or a multiple of 8 in [32, 248] (this module's policy: ptxas
    allocates registers in such steps; 255 is no cap); raises ValueError naming it otherwise."""
    if not isinstance(regs, int) or (regs and (regs % 8 or not 32 <= regs <= 248)):
        raise ValueError(f"regs={regs!r}: use 0 (no cap) or a multiple of 8 in [32, 248] "
                         f"(registers a thread)")
    return regs


def capped_name(base: str, regs: int) -> str | None:
    """The kernel name that asks for a cap of ``regs`` registers a thread (``base`` unchanged
    in front, so profiles still match it), or None for ``regs`` 0: no cap, the default name."""
    if not check_regs(regs):
        return None
    install()
    return f"{base}{_TAG}{regs}"


def requested_regs(name: str) -> int:
    """The cap a kernel (module) name asks for; 0 if none."""
    m = _NAME.search(name)
    return int(m.group(1)) if m else 0


def cap_module(module, regs: int) -> None:
    """Outline ``module``'s kernel launch and set ``nvvm.maxnreg = regs`` on the kernel, in
    place. Raises if the module holds no ``gpu.launch`` (nothing would be capped)."""
    from jaxlib.mlir import ir, passmanager
    import jaxlib.mlir._mlir_libs._mlirGPUPasses  # noqa: F401  (registers the gpu-* passes)

    if not any(op.operation.name == "gpu.launch" for op in walk_ops(module.operation)):
        raise ValueError("cap_module: the module launches no kernel (no gpu.launch)")
    passmanager.PassManager.parse("builtin.module(canonicalize)", module.context).run(
        module.operation)
    for launch in [op for op in walk_ops(module.operation) if op.name == "gpu.launch"]:
        sink_descriptors(launch)
    passmanager.PassManager.parse("builtin.module(gpu-kernel-outlining)", module.context).run(
        module.operation)
    i32 = ir.IntegerType.get_signless(32, module.context)
    kernels = [op for op in walk_ops(module.operation)
               if op.operation.name == "gpu.func" and "kernel" in op.operation.attributes]
    if not kernels:
        raise ValueError("cap_module: outlining produced no gpu.func kernel")
    for op in kernels:
        op.operation.attributes["nvvm.maxnreg"] = ir.IntegerAttr.get(i32, regs)
    module.operation.verify()


# What mosaic-gpu-sink-memref-descriptors sinks: the ops that build a memref descriptor from a
# pointer (constants, llvm.mlir.undef, llvm.insertvalue, the cast to a memref).
_DESCRIPTOR_OPS = ("arith.constant", "llvm.mlir.constant", "llvm.mlir.undef", "llvm.insertvalue",
                   "builtin.unrealized_conversion_cast")


def sink_descriptors(launch) -> None:
    """Clone into ``launch``'s body (at its start, in dependency order) every chain of
    :data:`_DESCRIPTOR_OPS` that computes a value the body uses from outside, and make the body
    use the clones: Mosaic GPU's ``mosaic-gpu-sink-memref-descriptors``. Only the pointers under
    the chains (and values no chain computes) are left to cross into the kernel."""
    from jaxlib.mlir import ir

    launch = launch.operation
    inner = [op for op in walk_ops(launch) if op != launch]
    inside = set(inner)
    order, seen = [], set()

    def visit(op):  # post-order: an op after the ops its operands come from
        if op in seen or op.name not in _DESCRIPTOR_OPS:
            return
        seen.add(op)
        for v in op.operands:
            if not isinstance(v.owner, ir.Block):
                visit(v.owner.operation)
        order.append(op)

    for op in inner:
        for v in op.operands:
            if not isinstance(v.owner, ir.Block) and v.owner.operation not in inside:
                visit(v.owner.operation)
    first = launch.regions[0].blocks[0].operations[0]
    clone = {}
    for op in order:
        new = op.clone(ip=ir.InsertionPoint(first))
        for i, v in enumerate(new.operands):
            if v in clone:
                new.operands[i] = clone[v]
        clone.update(zip(op.results, new.results))
    for op in inner:
        for i, v in enumerate(op.operands):
            if v in clone:
                op.operands[i] = clone[v]


def walk_ops(op):
    """``op`` and every operation nested in it, pre-order."""
    yield op
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield from walk_ops(child.operation)


def install() -> None:
    """Wrap Mosaic GPU's lowering rule (once) so that a module named by :func:`capped_name`
    is capped (:func:`cap_module`) before it is serialized."""
    global _installed
    if _installed:
        return
    from jax.experimental.mosaic.gpu import core
    from jaxlib.mlir import ir

    rule = getattr(core, "_mosaic_gpu_lowering_rule", None)
    if rule is None:
        raise RuntimeError("mgpu_regcap: jax.experimental.mosaic.gpu.core has no "
                           "_mosaic_gpu_lowering_rule (a jax other than 0.11.2?): no register "
                           "cap can be set")

    def capping_rule(ctx, *args, module, **kwargs):
        attrs = module.operation.attributes
        name = ir.StringAttr(attrs["sym_name"]).value if "sym_name" in attrs else ""
        if regs := requested_regs(name):
            cap_module(module, regs)
        return rule(ctx, *args, module=module, **kwargs)

    core._mosaic_gpu_lowering_rule = capping_rule
    _installed = True
