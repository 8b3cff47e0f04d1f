"""Where a jitted step's device time goes: trace calls with ``jax.profiler`` and sum the device
events by kernel, read straight from the trace's XSpace (``jax.profiler.ProfileData``; no
TensorBoard or xprof needed).

On GPU the events are the kernels on the device's stream lines (``/device:GPU:N`` planes, lines
named ``Stream ...``), keyed by kernel name with the HLO op that launched them; on CPU (tests,
smoke runs) they are the host thunks that carry an ``hlo_op`` stat. Times are totals over the
traced calls divided by the number of calls: device busy time per call, which is below the wall
time per call by whatever the device sat idle (launch gaps, host syncs).

    summary = profile_calls(lambda: step(...), n=5, trace_dir="/tmp/tr")
    print(render_md(summary, top=25))
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import os
import re
import time
import warnings

import jax

GPU_PLANE = re.compile(r"^/device:(GPU|TPU):\d+$")


@dataclasses.dataclass(frozen=True)
class Event:
    name: str  # kernel (GPU) or thunk (CPU) name
    hlo_op: str  # the HLO instruction it belongs to ("" if the trace does not say)
    dur_ns: float
    start_ns: float = 0.0


def _stats(ev) -> dict:
    out = {}
    try:
        with warnings.catch_warnings():  # jax 0.11's binding warns about its own stat type
            warnings.simplefilter("ignore", DeprecationWarning)
            for k, v in ev.stats:
                out[k] = v
    except Exception:  # noqa: BLE001 - a stat the binding cannot convert is not needed here
        pass
    return out


def device_events(xplane_path: str) -> list[Event]:
    """The device work in one ``*.xplane.pb``: GPU kernels if the trace has a device plane,
    else CPU thunks tagged with an ``hlo_op``."""
    from jax.profiler import ProfileData

    pd = ProfileData.from_file(xplane_path)
    dev_planes = [p for p in pd.planes if GPU_PLANE.match(p.name)]
    out: list[Event] = []
    if dev_planes:
        for plane in dev_planes:
            for line in plane.lines:
                if not line.name.startswith("Stream"):
                    continue  # "XLA Ops"/"XLA Modules" lines repeat the kernels' time
                for ev in line.events:
                    st = _stats(ev)
                    out.append(Event(ev.name, str(st.get("hlo_op", "")), float(ev.duration_ns),
                                     float(ev.start_ns)))
        return out
    for plane in pd.planes:
        for line in plane.lines:
            for ev in line.events:
                st = _stats(ev)
                if "hlo_op" in st:
                    out.append(Event(ev.name, str(st["hlo_op"]), float(ev.duration_ns),
                                     float(ev.start_ns)))
    return out


def latest_xplane(trace_dir: str) -> str:
    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {trace_dir!r}: did jax.profiler.trace run?")
    return max(paths, key=os.path.getmtime)


def profile_calls(fn, n: int, trace_dir: str, warmup: int = 1, units_per_call: int = 1) -> dict:
    """Run ``fn()`` ``warmup`` times untraced, then ``n`` times under ``jax.profiler.trace``
    (each call synced); return ``summarize`` of the trace plus the traced wall time, both per
    unit (``units_per_call`` units, e.g. decode steps, per call)."""
    if n < 1:
        raise ValueError(f"profile_calls needs n >= 1 calls, got {n}")
    for _ in range(warmup):
        jax.block_until_ready(fn())
    os.makedirs(trace_dir, exist_ok=True)
    with jax.profiler.trace(trace_dir):
        t0 = time.perf_counter()
        for _ in range(n):
            jax.block_until_ready(fn())
        wall = (time.perf_counter() - t0) / (n * units_per_call)
    events = device_events(latest_xplane(trace_dir))
    s = summarize(events, n * units_per_call)
    s["gaps"] = idle_gaps(events, top=8)
    s["wall_ns_per_call"] = wall * 1e9
    s["trace_dir"] = trace_dir
    return s


def summarize(events: list[Event], n_calls: int) -> dict:
    """Per-kernel totals per call, largest first; ``busy_ns_per_call`` is their sum."""
    if n_calls < 1:
        raise ValueError(f"n_calls must be >= 1, got {n_calls}")
    tot: dict[tuple[str, str], float] = collections.defaultdict(float)
    cnt: dict[tuple[str, str], int] = collections.defaultdict(int)
    for e in events:
        tot[(e.name, e.hlo_op)] += e.dur_ns
        cnt[(e.name, e.hlo_op)] += 1
    busy = sum(tot.values()) / n_calls
    rows = [{"kernel": k[0], "hlo_op": k[1], "ns_per_call": v / n_calls,
             "launches_per_call": cnt[k] / n_calls,
             "pct_busy": 100.0 * v / n_calls / busy if busy else 0.0}
            for k, v in sorted(tot.items(), key=lambda kv: -kv[1])]
    return {"n_calls": n_calls, "busy_ns_per_call": busy, "rows": rows,
            "launches_per_call": len(events) / n_calls}


def idle_gaps(events: list[Event], top: int = 8) -> list[dict]:
    """The ``top`` longest stretches with no device event running (over all streams), each with
    the kernels that end before and start after it: where the device waits on the host. The
    traced calls are synced one by one, so the gaps between calls are among them (they show
    the per-call host time; a gap inside a call names two kernels of the same step)."""
    evs = sorted(events, key=lambda e: e.start_ns)
    gaps = []
    end, last = None, None
    for e in evs:
        if end is not None and e.start_ns > end:
            gaps.append({"idle_ns": e.start_ns - end, "after": last.name, "before": e.name})
        if end is None or e.start_ns + e.dur_ns > end:
            end, last = e.start_ns + e.dur_ns, e
    return sorted(gaps, key=lambda g: -g["idle_ns"])[:top]


def render_md(summary: dict, top: int = 25, title: str = "") -> str:
    """A markdown table of the ``top`` kernels and the busy / wall totals."""
    wall = summary.get("wall_ns_per_call")
    head = (f"{title}device busy {summary['busy_ns_per_call'] / 1e3:.1f} us/call"
            + (f" of {wall / 1e3:.1f} us wall" if wall else "")
            + f", {summary['launches_per_call']:.0f} launches/call "
            f"({summary['n_calls']} calls traced)\n\n")
    lines = ["| kernel | hlo op | us/call | launches/call | % busy |", "|---|---|---|---|---|"]
    for r in summary["rows"][:top]:
        name = r["kernel"] if len(r["kernel"]) <= 70 else r["kernel"][:67] + "..."
        lines.append(f"| `{name}` | `{r['hlo_op'][:40]}` | {r['ns_per_call'] / 1e3:.1f} | "
                     f"{r['launches_per_call']:.1f} | {r['pct_busy']:.1f} |")
    rest = summary["rows"][top:]
    if rest:
        lines.append(f"| ({len(rest)} more) | | {sum(r['ns_per_call'] for r in rest) / 1e3:.1f} | "
                     f"{sum(r['launches_per_call'] for r in rest):.1f} | "
                     f"{sum(r['pct_busy'] for r in rest):.1f} |")
    gaps = summary.get("gaps") or []
    if gaps:
        lines += ["", "Longest idle gaps: " + "; ".join(
            f"{g['idle_ns'] / 1e3:.0f} us after `{g['after'][:40]}` before `{g['before'][:40]}`"
            for g in gaps[:5])]
    return head + "\n".join(lines) + "\n"
