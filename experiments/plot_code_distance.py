"""Code-distance histogram (issue 9, claim 2) from a ``diagnose.json`` that ``repro.py
--post_eval=diagnose`` (or ``trace_jax.diagnose``) wrote: a markdown table and a log-scale bar
plot of how many FP4 codes the trainer's recomputation puts 0, 1, 2, ... code steps away from the
rollout's, per trainer variant.

  python experiments/plot_code_distance.py DIAGNOSE_JSON --out experiments/results/NAME --note "..."
"""

from __future__ import annotations

import argparse
import json


def rows(diag: dict) -> list[tuple[str, list[int]]]:
    """(variant, integer counts per distance) of the variants that have a histogram."""
    return [(name, [int(c) for c in v["code_distance_hist"]]) for name, v in diag.items()
            if isinstance(v, dict) and sum(v.get("code_distance_hist") or [0]) > 0]


def markdown(diag: dict, note: str = "") -> str:
    hs = rows(diag)
    if not hs:
        raise ValueError("no variant in this diagnose.json has a code_distance_hist")
    width = max(len(h) for _, h in hs)
    lines = ["# Code-distance histogram: trainer vs rollout FP4 codes", ""]
    if note:
        lines += [note, ""]
    lines += ["| variant | codes | agree | mismatched | 1 step apart (of mismatched) | "
              + " | ".join(f"d={i}" for i in range(width)) + " |",
              "|---" * (5 + width) + "|"]
    for name, h in hs:
        total, mism = sum(h), sum(h[1:])
        one = h[1] / mism if mism else float("nan")
        lines.append(f"| {name} | {total} | {h[0] / total:.4f} | {mism} | {one:.4f} | "
                     + " | ".join(str(c) for c in h) + " |")
    lines += ["", "d = |difference of the signed code indices| on the 15-value E2M1 grid "
              "(-6 .. 6), 0 .. 14."]
    return "\n".join(lines) + "\n"


def plot(diag: dict, path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable; no PNG written", flush=True)
        return False
    hs = rows(diag)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    w = 0.8 / len(hs)
    for i, (name, h) in enumerate(hs):
        total = sum(h)
        ax.bar([d + i * w for d in range(len(h))], [c / total for c in h], width=w, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("code distance (steps on the E2M1 grid)")
    ax.set_ylabel("fraction of codes")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("diagnose_json")
    ap.add_argument("--out", required=True, help="prefix: writes OUT.md, OUT.json, OUT.png")
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    with open(a.diagnose_json) as f:
        diag = json.load(f)
    md = markdown(diag, a.note)
    with open(a.out + ".md", "w") as f:
        f.write(md + (f"\n![histogram]({a.out.rsplit('/', 1)[-1]}.png)\n" if plot(
            diag, a.out + ".png") else ""))
    with open(a.out + ".json", "w") as f:
        json.dump(diag, f, indent=1)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
