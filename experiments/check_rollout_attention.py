"""A rollout kernel inside a real rollout, against its XLA reference, per P precision.

  python experiments/check_rollout_attention.py --config configs/tiny.py [--checkpoint DIR] \
      [--batches 2] [--mode fp4_rollout] [--piece attention|quantizer]

Session 30 found TRACE's rollout ~10x closer to the trainer with the kernel's P rounded to bf16
than with its f32 P on an H200, while the isolated kernel was f32-accurate (NOTES_attention).
This runs the rollout engine greedily on eval batches twice per precision: once with the decode
attention the engine picks (the Triton kernel on a GPU; on a CPU the same kernel in Pallas
interpret mode) and once with ``ops.decode_attention_reference`` (f32 at Precision.HIGHEST, P
rounded to bf16 for "bf16"). Over each row's response positions up to its first differing
token it reports the kernel - reference log-prob gap (max, mean) and the rows whose tokens
agree throughout. An f32-P kernel that computes what it should stays within float rounding of
its reference; a bf16-P one differs by its own rounding of P. On the H200 (session 31a) the
f32-P kernel gave the reference's log-probs exactly.

``--piece quantizer`` compares the fused activation quantizer with XLA's quantizer ops instead
(the engine's own attention), and also the recorded codes and scales of every site. On the
H200 (session 31f) the two, bit-identical on the same input, differed inside one rollout, most
likely because XLA's GPU fusions skip bf16 casts (``xla_allow_excess_precision``;
NOTES_attention session 31).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _REPO)


def compare(lp_a, lp_b, tok_a, tok_b, mask) -> dict:
    """Log-prob gaps over each row's masked positions before its first token difference."""
    lp_a, lp_b, tok_a, tok_b, mask = (np.asarray(x) for x in (lp_a, lp_b, tok_a, tok_b, mask))
    same_before = np.cumsum(tok_a != tok_b, axis=1) == 0  # positions up to the first difference
    keep = mask & same_before
    gap = np.abs(lp_a - lp_b)[keep]
    return {"positions": int(keep.sum()), "gap_max": float(gap.max()) if gap.size else 0.0,
            "gap_mean": float(gap.mean()) if gap.size else 0.0,
            "rows_identical": float(np.mean(np.all(tok_a == tok_b, axis=1)))}


def run(config, params, batches: int, mode: str, piece: str = "attention") -> dict:
    """{precision: [per-batch compare() of kernel vs reference]} for the decode attention
    (``piece="attention"``) or the activation quantizer (``"quantizer"``: the fused kernel,
    interpreted on a CPU, vs XLA's ops; both bit-identical to ``quant`` in the unit tests)."""
    import jax

    from trace_jax import experiment as X
    from trace_jax import numerics as nx
    from trace_jax import ops
    from trace_jax import rollout as R

    if piece not in ("attention", "quantizer"):
        raise ValueError(f"piece={piece!r}: use 'attention' or 'quantizer'")
    original, quantizer = ops._kernel, nx.ACTIVATION_QUANTIZER
    kernel = original
    if jax.default_backend() == "cpu":  # the kernel in interpret mode
        interp = triton_decode_attention()
        kernel = lambda mod, name: interp if name == "decode_attention" else None  # noqa: E731
    backends = {"kernel": kernel,
                "reference": lambda mod, name: None if name == "decode_attention"
                else original(mod, name)}
    if piece == "quantizer":  # the engine's own attention; the quantizer switched
        backends = {"kernel": "kernel", "reference": "xla"}
    runs = {}  # (precision, batch, backend) -> Rollout
    try:
        for name, pick in backends.items():  # one compile per (backend, precision)
            if piece == "quantizer":
                nx.ACTIVATION_QUANTIZER = pick
            else:
                ops._kernel = pick
            jax.clear_caches()  # the backend is not part of the compiled rollout's key
            for p in ("f32", "bf16"):
                config.rollout.attention_p_precision = p
                exp = X.build(config)
                num = exp.rollout_numerics.with_mode(mode)
                if piece == "quantizer" and mode != "bf16":
                    num = num.recording_all_codes()  # every site's codes and scales, compared
                sampling = dataclasses.replace(exp.sampling, temperature=0.0, top_k=0, top_p=1.0)
                rp = R.sync_weights(params, num, dtype=exp.cfg.dtype)
                for b in range(batches):
                    prompts, lens = X.encode_prompts(exp, exp.eval_data.batch(b))
                    runs[p, b, name] = R.generate(rp, prompts, lens, jax.random.key(0),
                                                  cfg=exp.cfg, numerics=num, sampling=sampling,
                                                  capture_hints=piece == "quantizer")
    finally:
        ops._kernel, nx.ACTIVATION_QUANTIZER = original, quantizer
        jax.clear_caches()
    out = {}
    for p in ("f32", "bf16"):
        out[p] = []
        for b in range(batches):
            k, r = runs[p, b, "kernel"], runs[p, b, "reference"]
            out[p].append(compare(k.logprobs, r.logprobs, k.tokens, r.tokens, k.response_mask))
            if piece == "quantizer" and k.guidance.hints:
                out[p][-1]["sites"] = site_differences(k.guidance, r.guidance)
    return out


def triton_decode_attention():
    """``ops.decode_attention``'s kernel entry with the Triton kernel forced: compiled on a GPU,
    in Pallas interpret mode on a CPU (where ``backend="auto"`` would take the reference)."""
    import functools

    from pallas_kernels.decode_attention import decode_attention

    return functools.partial(decode_attention, backend="triton")


def site_differences(a, b) -> dict:
    """{site: {field: share of recorded positions' entries that differ}} between two rollouts'
    recorded codes (bits), block scales and global scales, for the sites where any differs."""
    rec = np.asarray(a.recorded) & np.asarray(b.recorded)  # [B, T]
    out = {}
    for site in sorted(a.hints):
        ha, hb = a.hints[site], b.hints[site]
        d = {}
        for field in ("bits", "scales", "global_scale"):
            x, y = np.asarray(getattr(ha, field)), np.asarray(getattr(hb, field))
            if x.shape != y.shape:
                d[field] = 1.0
                continue
            x, y = (v.view(f"u{v.dtype.itemsize}") for v in (x, y))  # bits
            m = np.broadcast_to(rec.reshape(rec.shape + (1,) * (x.ndim - 2)), x.shape)
            if m.any() and (x[m] != y[m]).any():
                d[field] = float(np.mean(x[m] != y[m]))
        if d:
            out[site] = d
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--checkpoint", default="", help="a run directory (default: initial params)")
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--mode", default="fp4_rollout", choices=["fp4_rollout", "bf16"])
    ap.add_argument("--piece", default="attention", choices=["attention", "quantizer"],
                    help="the kernel compared with its XLA reference: the decode attention or "
                         "the activation quantizer")
    a = ap.parse_args(argv)
    import importlib.util

    import jax

    from trace_jax import checkpoint as C
    from trace_jax import model as M

    spec = importlib.util.spec_from_file_location("experiment_config", a.config)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = mod.get_config()
    if a.checkpoint:
        params = C.load_params(a.checkpoint, config)
    else:
        params = M.init_params(M.ModelConfig.from_config(config.model), jax.random.key(0))
    res = run(config, params, a.batches, a.mode, a.piece)
    what = ("decode attention kernel vs reference" if a.piece == "attention" else
            "activation quantizer kernel vs XLA")
    print(f"{jax.default_backend()}: {what} in a greedy "
          f"{a.mode} rollout ({a.config}, {a.checkpoint or 'initial params'})")
    for p, rows in res.items():
        for b, r in enumerate(rows):
            print(f"P {p:4s} batch {b}: log-prob gap max {r['gap_max']:.3e} mean "
                  f"{r['gap_mean']:.3e} over {r['positions']} positions; rows identical "
                  f"{r['rows_identical']:.3f}")
            for site, d in r.get("sites", {}).items():
                print(f"    {site}: " + ", ".join(f"{f} {v:.2e}" for f, v in d.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
