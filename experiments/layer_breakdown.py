"""Where a decode layer's time goes: per-layer device time by kernel class, from the per-kernel
profiles that ``bench_rollout.py --profile_steps`` writes (``profile/<engine>_<context>.md``).

    python experiments/layer_breakdown.py --layers 4 \
        experiments/results/gpu/session8/e_32k/bf16_32768.md \
        experiments/results/gpu/session8/e_32k/fp4_32768.md

Classes: attention (``decode_attention*``), expert matmuls (``*grouped_matmul*``,
``fp4_matmul*``), once per step (a kernel launched once per profiled call that is not a sort:
the lm_head GEMM, sampling), the rest (everything else: projections, norms, routing, quantize,
KV append, split combine), and idle (wall minus busy). Per layer = (call total - once per step) /
layers. The md's "(N more)" row goes to the rest.
"""

from __future__ import annotations

import argparse
import json
import re

CLASSES = ("attention", "expert matmuls", "rest", "idle")


def parse(md: str) -> dict:
    """One profile md -> {busy_us, wall_us, rows: [(kernel, us_per_call, launches_per_call)]}."""
    head = re.search(r"device busy ([\d.]+) us/call of ([\d.]+) us wall", md)
    if not head:
        raise ValueError("not a profile summary: no 'device busy ... us/call of ... us wall' line")
    rows = []
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"[\d.]+", cells[2]):
            continue
        rows.append((cells[0].strip("`"), float(cells[2]), float(cells[3])))
    return dict(busy_us=float(head.group(1)), wall_us=float(head.group(2)), rows=rows)


def kernel_class(name: str, launches: float) -> str:
    if name.startswith("decode_attention"):
        return "attention"
    if "grouped_matmul" in name or name.startswith("fp4_matmul"):
        return "expert matmuls"
    if launches == 1 and not name.startswith("sort") and not name.startswith("("):
        return "once per step"
    return "rest"


def breakdown(profile: dict, layers: int) -> dict:
    """Per-layer microseconds of each class (idle spread over layers like the rest). Needs a
    step of >= 2 layers: "once per step" is told from per-layer kernels by launch count."""
    if layers < 2:
        raise ValueError(f"layers must be >= 2 (once-per-step kernels are told apart by their "
                         f"launch count), got {layers}")
    tot = {c: 0.0 for c in (*CLASSES, "once per step")}
    for name, us, launches in profile["rows"]:
        tot[kernel_class(name, launches)] += us
    tot["idle"] = profile["wall_us"] - profile["busy_us"]
    per_layer = {c: tot[c] / layers for c in CLASSES}
    per_layer["layer"] = sum(per_layer.values())
    per_layer["once per step"] = tot["once per step"]
    return per_layer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profiles", nargs="+", help="profile md files (<engine>_<context>.md)")
    ap.add_argument("--layers", type=int, required=True, help="layers in the profiled step")
    ap.add_argument("--out", default="", help="write the table (md) and JSON here (prefix)")
    a = ap.parse_args()
    lines = [f"Per-layer device time (us) from {len(a.profiles)} profiles, {a.layers} layers each.",
             "", "| profile | attention | expert matmuls | rest | idle | layer | once per step |",
             "|---|---|---|---|---|---|---|"]
    out = {}
    for p in a.profiles:
        with open(p) as f:
            b = breakdown(parse(f.read()), a.layers)
        out[p] = b
        lines.append(f"| `{'/'.join(p.split('/')[-2:])}` | " + " | ".join(
            f"{b[c]:.0f}" for c in (*CLASSES, "layer", "once per step")) + " |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out + ".md", "w") as f:
            f.write(text + "\n")
        with open(a.out + ".json", "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
