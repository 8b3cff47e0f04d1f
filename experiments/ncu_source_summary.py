"""Summarise Nsight Compute CSV exports: warp stall reasons per kernel launch, and PC-sampling
stall samples per SASS opcode.

  python experiments/ncu_source_summary.py DIR

Reads, where present, DIR/raw*.csv (``ncu --import R --page raw --csv``) and DIR/source.csv
(``ncu --import R --page source --csv --print-source sass``). For each launch in a raw page it
prints the stall reasons (``smsp__average_warps_issue_stalled_<reason>_per_issue_active``: warps
stalled on that reason per issued instruction; their sum is the cycles between a warp's issues)
largest first. For the source page it sums every sampling column by opcode (the SASS mnemonic
without predicate or modifiers) and prints the opcodes with the most samples.
"""

from __future__ import annotations

import csv
import glob
import os
import re
import sys
from collections import defaultdict

EXECUTED = "Instructions Executed"  # warp instructions, per SASS line
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def _num(s: str) -> float | None:
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def raw_stalls(path: str) -> list[tuple[str, dict[str, float]]]:
    """[(launch label, {reason: warps stalled per issue})] of one raw-page CSV."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    head_i = next((i for i, r in enumerate(rows) if any(STALL.match(c) for c in r)), None)
    if head_i is None:
        return []
    head = rows[head_i]
    cols = {i: STALL.match(c).group(1) for i, c in enumerate(head) if STALL.match(c)}
    name_i = next((i for i, c in enumerate(head) if c in ("Kernel Name", "Function Name")), None)
    grid_i = next((i for i, c in enumerate(head) if c == "Grid Size"), None)
    out = []
    for r in rows[head_i + 1:]:
        vals = {reason: _num(r[i]) for i, reason in cols.items() if i < len(r)}
        vals = {k: v for k, v in vals.items() if v is not None}
        if not vals:  # the units row
            continue
        label = " ".join(r[i] for i in (name_i, grid_i) if i is not None and i < len(r))
        out.append((label, vals))
    return out


def _opcode(sass: str, modifiers: bool = False) -> str:
    s = sass.strip()
    s = re.sub(r"^@!?U?P\w+\s+", "", s)
    op = s.split(" ")[0] if s else "?"
    return op if modifiers else op.split(".")[0]


def source_by_opcode(path: str) -> list[tuple[str, list[str], dict[str, dict[str, float]]]]:
    """[(kernel, sampling columns, {opcode: {column: samples}})] of one source-page CSV: a new
    table starts at every header row (one holding a "Source" column)."""
    tables = []
    kernel = "?"
    with open(path, newline="") as f:
        reader = csv.reader(f)
        head = None
        for r in reader:
            if not r:
                continue
            if "Source" in r:
                head = r
                src_i = r.index("Source")
                cols = [(i, c) for i, c in enumerate(r) if "Sampl" in c or "stall" in c.lower()
                        or c == EXECUTED]
                tables.append((kernel, [c for _, c in cols], defaultdict(lambda: defaultdict(float))))
                continue
            if r[0] == "Kernel Name" and len(r) > 1:  # the title line before each table
                kernel = r[1][:100]
                continue
            if head is None or len(r) <= src_i:
                continue
            op = _opcode(r[src_i], modifiers=True)
            for i, c in cols:
                v = _num(r[i]) if i < len(r) else None
                if v:
                    tables[-1][2][op][c] += v
    return tables


def main(argv: list[str]) -> int:
    d = argv[1] if len(argv) > 1 else "."
    for path in sorted(glob.glob(os.path.join(d, "raw*.csv"))):
        print(f"== {os.path.basename(path)}: warps stalled per issued instruction, by reason")
        for label, vals in raw_stalls(path):
            total = sum(vals.values())
            top = sorted(vals.items(), key=lambda kv: -kv[1])[:8]
            print(f"  {label[:90]}\n    total {total:.2f}: " + ", ".join(
                f"{k} {v:.2f}" for k, v in top))
    src = os.path.join(d, "source.csv")
    if os.path.exists(src):
        for kernel, cols, ops in source_by_opcode(src):
            if not cols:
                continue
            key = cols[0]
            total = sum(o.get(key, 0.0) for o in ops.values()) or 1.0
            n_ex = sum(o.get(EXECUTED, 0.0) for o in ops.values()) or 1.0
            reasons = [c for c in cols if c.startswith("stall_") and "Not Issued" not in c]
            print(f"== source page {kernel}: {n_ex:.4g} warp instructions executed, "
                  f"{total:.0f} stall samples ('{key}')")
            print(f"   {'opcode':24s} {'exec%':>6s} {'samp%':>6s}  top stall reasons (samples)")
            for op, o in sorted(ops.items(), key=lambda kv: -kv[1].get(EXECUTED, 0.0))[:20]:
                top = sorted(((o.get(c, 0.0), c[6:]) for c in reasons), reverse=True)[:4]
                print(f"   {op:24s} {100 * o.get(EXECUTED, 0.0) / n_ex:6.1f} "
                      f"{100 * o.get(key, 0.0) / total:6.1f}  "
                      + ", ".join(f"{c} {v:.0f}" for v, c in top if v))
            sums = {c[6:]: sum(o.get(c, 0.0) for o in ops.values()) for c in reasons}
            print("   all opcodes: " + ", ".join(
                f"{c} {100 * v / total:.0f}%" for c, v in sorted(sums.items(), key=lambda kv: -kv[1])[:9]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
