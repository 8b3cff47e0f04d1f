"""experiments/dump_step_hlo.py's source attribution on a CPU-compiled program: the stack frames
of the compiled HLO resolve to innermost-first call chains, and a profiled kernel is attributed to
the source lines of the ops inside its fusion."""

import os
import re
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))
import dump_step_hlo as D  # noqa: E402


def _inner(x):
    return jnp.sin(x) * 3.0


def _middle(x):
    return _inner(x) + 1.0


def _outer(x):
    return jnp.cos(_middle(x))


def test_frames_resolve_to_call_chains_and_kernels_to_source_lines():
    hlo = jax.jit(_outer).lower(jnp.ones(8)).compile().as_text()
    frames = D._frames(hlo)
    chains = set()
    for fid in frames:  # every chain walks innermost -> outermost and ends
        out, seen = [], set()
        while fid > 0 and fid not in seen:
            seen.add(fid)
            loc, fid = frames[fid]
            out.append(loc.split(":")[1])
        chains.add(tuple(out))
    assert ("_inner", "_middle", "_outer") in {c[:3] for c in chains}, chains
    fusion = next(m.group(1) for m in (re.search(r"%([\w.\-]+) = \S+ fusion\(", ln)
                                        for ln in hlo.splitlines()) if m)
    prof = {"rows": [{"kernel": fusion.replace(".", "_"), "ns_per_call": 2000.0,
                      "launches_per_call": 1.0}]}
    rep = D.source_report(hlo, prof)
    assert "test_dump_step_hlo.py:_inner:" in rep and "< test_dump_step_hlo.py:_middle:" in rep
    assert "2.0  test_dump_step_hlo.py:" in rep.split("innermost source function")[1]
