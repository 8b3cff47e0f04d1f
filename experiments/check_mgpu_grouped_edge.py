"""Bit-for-bit checks of grouped FP4 Mosaic GPU kernel variants against the library's default.

  python experiments/check_mgpu_grouped_edge.py --variants "tk=128,steps=3;GROUPED_TILES=2" \
      [--knobs SERIAL_TILES=0] [--shapes 2048x768,768x2048] [--pair] [--repeats 3]

Each variant is a set of integer keyword arguments of ``fp4_grouped_matmul_mgpu`` (and, with
``--pair``, of ``fp4_grouped_swiglu_mgpu`` at the 2048 x 768 gate / up shape) and of
``fp4_matmul_mgpu``'s integer module knobs (upper-case names, set while that variant runs);
``--knobs`` sets such knobs for the whole run, the default's calls included. Per expert shape
K x N (128 experts, NVFP4) two group layouts: 512 tokens routed top-8 (4096 rows) and skewed
groups (400 rows: one expert of 300, so several chunks; experts of 5 and 57; the rest empty;
the groups sum to 362, so the last 38 rows store 0). Every variant runs ``--repeats`` times:
each output must equal the default kernel's bit for bit, hold no NaN, and equal the first run
(a race need not show in one run). Prints one line per check; exits 1 naming the failures. GPU
only.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)
from experiments.check_mgpu_matmul import _knobs as module_knobs  # noqa: E402
from pallas_kernels import fp4_matmul_mgpu as FM  # noqa: E402
from pallas_kernels.bench_matmul import route  # noqa: E402
from trace_jax.quant import quantize  # noqa: E402

E, TOPK = 128, 8


def _variant_keywords() -> set[str]:
    """The keyword arguments a variant may set: the ``int | None`` ones that the single-weight
    and the fused-pair grouped calls both take."""
    def kw(f):
        return {n for n, q in inspect.signature(f).parameters.items()
                if q.kind is q.KEYWORD_ONLY and q.annotation == "int | None"}
    return kw(FM.fp4_grouped_matmul_mgpu) & kw(FM.fp4_grouped_swiglu_mgpu)


def int_knob(name: str) -> bool:
    """Whether ``name`` is a public module knob of fp4_matmul_mgpu that takes an integer (its
    value a bool, an int or None), so that setting it from the command line means something."""
    return (not name.startswith("_") and hasattr(FM, name)
            and isinstance(getattr(FM, name), (bool, int, type(None))))


def parse_variants(spec: str) -> list[dict]:
    """``"tk=128,steps=3;GROUPED_TILES=2"`` -> [{"tk": 128, "steps": 3},
    {"GROUPED_TILES": 2}]; a part that is not name=integer[,name=integer...], or a lower-case
    name the grouped calls do not take, or an upper-case one that is no :func:`int_knob`, exits
    naming it (before any GPU work)."""
    out, known = [], _variant_keywords()
    for part in filter(None, spec.split(";")):
        if not re.fullmatch(r"[A-Za-z_]+=-?\d+(,[A-Za-z_]+=-?\d+)*", part):
            raise SystemExit(f"--variants: {part!r} is not name=integer[,name=integer...]")
        v = {k: int(x) for k, x in (p.split("=") for p in part.split(","))}
        knobs = sorted(n for n in v if n.isupper() and not int_knob(n))
        if knobs:
            raise SystemExit(f"--variants: {part!r}: {knobs} not integer knobs of "
                             f"fp4_matmul_mgpu")
        unknown = sorted(n for n in set(v) - known if not n.isupper())
        if unknown:
            raise SystemExit(f"--variants: {part!r}: {unknown} not keyword arguments of "
                             f"fp4_grouped_matmul_mgpu (it takes {sorted(known)})")
        out.append(v)
    if not out:
        raise SystemExit("--variants: give at least one, e.g. 'tk=128'")
    return out


def split_variant(v: dict) -> tuple[dict, dict]:
    """A parsed variant as (keyword arguments, module knobs: its upper-case names)."""
    return ({n: x for n, x in v.items() if not n.isupper()},
            {n: x for n, x in v.items() if n.isupper()})


def parse_knobs(spec: str) -> dict:
    """``"SERIAL_TILES=0"`` -> {"SERIAL_TILES": 0}; a name that is no :func:`int_knob`, or a
    value that is not an integer, exits naming it."""
    out = {}
    for part in filter(None, spec.split(",")):
        name, _, value = part.partition("=")
        if not int_knob(name) or not re.fullmatch(r"-?\d+", value):
            raise SystemExit(f"--knobs: {part!r} is not KNOB=integer with an integer KNOB of "
                             f"fp4_matmul_mgpu")
        out[name] = int(value)
    return out


def parse_shapes(spec: str) -> list[tuple[int, int]]:
    """``"2048x768,128x768"`` -> [(2048, 768), (128, 768)]."""
    if not re.fullmatch(r"\d+x\d+(,\d+x\d+)*", spec):
        raise SystemExit(f"--shapes: {spec!r} is not KxN[,KxN...]")
    return [tuple(int(v) for v in kn.split("x")) for kn in spec.split(",")]


class EdgeCheck:
    """Runs checks and keeps the labels of those that failed."""

    def __init__(self, repeats: int):
        self.repeats, self.failures = repeats, []

    def check(self, label: str, f, args, base) -> bool:
        """f(*args) ``repeats`` times: each equal to ``base`` bit for bit (NaN included), no
        NaN in it, all equal to the first. Prints one line; True if it passed."""
        outs = [f(*args) for _ in range(self.repeats)]
        first = outs[0].astype(jnp.float32)
        diff = float(jnp.max(jnp.abs(first - base.astype(jnp.float32))))
        nan = bool(jnp.isnan(first).any())
        same = all(bool(jnp.array_equal(o, outs[0], equal_nan=True)) for o in outs[1:])
        ok = diff == 0 and not nan and same
        print(f"{'ok  ' if ok else 'FAIL'} {label}: maxdiff vs default {diff}, nan {nan}, "
              f"{self.repeats} runs identical {same}", flush=True)
        if not ok:
            self.failures.append(label)
        return ok


def weights(k: int, n: int, seed: int):
    q = quantize(jax.random.normal(jax.random.PRNGKey(seed), (E, k, n)), "nvfp4", axis=-2,
                 global_scope="tensor")
    return FM.prepare_mgpu(q)


def group_cases():
    """(name, group_sizes [E], rows M) of the two layouts the module docstring describes."""
    skew = jnp.zeros(E, jnp.int32).at[3].set(300).at[7].set(5).at[100].set(57)
    return (("512 tokens", route(512, E, TOPK, jax.random.PRNGKey(512)), 512 * TOPK),
            ("skewed", skew, 400))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", required=True)
    ap.add_argument("--knobs", default="")
    ap.add_argument("--shapes", default="2048x768,768x2048")
    ap.add_argument("--pair", action="store_true",
                    help="also the fused gate / up / SwiGLU kernel at 2048 x 768")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    variants, knobs, shapes = parse_variants(a.variants), parse_knobs(a.knobs), parse_shapes(
        a.shapes)
    if a.repeats < 1:
        raise SystemExit(f"--repeats {a.repeats}: at least 1")
    for name, v in knobs.items():
        setattr(FM, name, v)
    print(f"device {jax.devices()[0].device_kind}, jax {jax.__version__}, knobs {knobs}",
          flush=True)
    run = EdgeCheck(a.repeats)
    tag = lambda v: ",".join(f"{k}={x}" for k, x in v.items())  # noqa: E731
    for k, n in shapes:
        w = weights(k, n, k)
        for name, gs, m in group_cases():
            x = jax.random.normal(jax.random.PRNGKey(1), (m, k), jnp.bfloat16)
            base = jax.jit(lambda x, w, g: FM.fp4_grouped_matmul_mgpu(x, w, g, backend="mgpu"))(
                x, w, gs)
            for v in variants:
                kw, knobs = split_variant(v)
                with module_knobs(**knobs):  # (f traces at its first call, in check)
                    f = jax.jit(lambda x, w, g, kw=kw: FM.fp4_grouped_matmul_mgpu(
                        x, w, g, backend="mgpu", **kw))
                    run.check(f"{k}x{n} {name} {tag(v)}", f, (x, w, gs), base)
    if a.pair:
        wg, wu = weights(2048, 768, 7), weights(2048, 768, 8)
        for name, gs, m in group_cases():
            x = jax.random.normal(jax.random.PRNGKey(2), (m, 2048), jnp.bfloat16)
            base = jax.jit(lambda x, a, b, g: FM.fp4_grouped_swiglu_mgpu(
                x, a, b, g, backend="mgpu"))(x, wg, wu, gs)
            for v in variants:
                kw, knobs = split_variant(v)
                with module_knobs(**knobs):
                    f = jax.jit(lambda x, a, b, g, kw=kw: FM.fp4_grouped_swiglu_mgpu(
                        x, a, b, g, backend="mgpu", **kw))
                    run.check(f"pair {name} {tag(v)}", f, (x, wg, wu, gs), base)
    print("edge: all identical" if not run.failures else
          f"edge: {len(run.failures)} FAILED: {run.failures}", flush=True)
    return 1 if run.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
