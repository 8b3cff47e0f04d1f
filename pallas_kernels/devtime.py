"""Device time of a jitted call, for the kernel benchmarks' ``--device-time`` columns.

A synced call's wall time (the benchmarks' main columns, PERFORMANCE.md's protocol) includes the
launch and host time of the call; on the H200 that was ~250 us per Pallas call in session 6,
more than the kernel itself for short kernels. ``device_seconds`` profiles a few calls and
returns their kernels' device time per call (``experiments/profile_summary``): what the kernel
costs inside a larger program such as the decode step. The copy bandwidth that such times are
compared with is measured the same way (``copy_bandwidth_device``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback

import jax
import jax.numpy as jnp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from experiments import profile_summary as PS  # noqa: E402


def device_seconds(f, *args, n: int = 5, kernel: str | None = None) -> float:
    """Device-busy seconds per call of ``f(*args)`` (its kernels, summed), over ``n`` profiled
    calls after one untraced warm-up call; with ``kernel``, only the kernels whose name
    contains it (e.g. a Pallas kernel without its wrapper's small XLA kernels)."""
    return selected_seconds(device_summary(f, *args, n=n), kernel)


def device_summary(f, *args, n: int = 5) -> dict:
    """The :func:`profile_summary.profile_calls` summary of ``n`` profiled calls of ``f(*args)``
    (per-kernel rows with ``ns_per_call``; ``busy_ns_per_call``)."""
    with tempfile.TemporaryDirectory(prefix="devtime_") as d:
        return PS.profile_calls(lambda: f(*args), n, d)


def selected_seconds(summary: dict, kernel: str | None = None) -> float:
    """Seconds per call in a :func:`profile_summary.profile_calls` summary: all device-busy time
    (``kernel`` None) or the kernels whose name contains ``kernel``; raises if that is zero."""
    ns = (summary["busy_ns_per_call"] if kernel is None else
          sum(r["ns_per_call"] for r in summary["rows"] if kernel in r["kernel"]))
    if ns <= 0:
        raise RuntimeError(f"the profile holds no device time for {kernel or 'this call'}")
    return ns * 1e-9


def relerr(a, b) -> float:
    """Relative Frobenius error of a against b, in f32 (the benchmarks' accuracy column)."""
    a, b = a.astype(jnp.float32), b.astype(jnp.float32)
    return float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(b), 1e-30))


def copy_bandwidth_device(n_floats: int = 1 << 30, n: int = 5) -> float:
    """Read + write bytes per device-second of an elementwise pass over an f32 array."""
    x = jax.random.normal(jax.random.PRNGKey(0), (n_floats,), jnp.float32)
    f = jax.jit(lambda a: a * 1.0001)
    t = device_seconds(f, x, n=n)
    nbytes = 2 * x.nbytes
    del x
    return nbytes / t


def format_row(row: dict) -> str:
    """One result row as ``key=value`` pairs (floats to 4 significant digits), for the log."""
    return "  " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in row.items())


def table_lines(rows: list[dict]) -> list[str]:
    """A markdown table of result rows whose keys may differ (a failed run leaves some out,
    shown as "-"); columns in the last row's order, the others after."""
    cols = sorted({c for r in rows for c in r}, key=lambda c: list(rows[-1]).index(c)
                  if c in rows[-1] else 99)
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + [
        "| " + " | ".join((f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]))
                          if c in r else "-" for c in cols) + " |" for r in rows]


def sweep_header(title: str, command: str, note: str, argv=None) -> list[str]:
    """The markdown lines that open a sweep's table: ``# title: device (jax version)``, the
    command line (``command`` and ``argv``, or sys.argv[1:] when that is empty) and ``note``,
    each followed by a blank line."""
    line = " ".join([command, *(argv or sys.argv[1:])])
    return [f"# {title}: {jax.devices()[0].device_kind} (jax {jax.__version__})", "",
            f"command: `{line}`", "", note, ""]


def write_sweep(out_dir: str, stem: str, lines: list[str], rows: list[dict], copy_Bps: float,
                echo: bool = True):
    """A knob sweep's results: ``stem.md`` (``lines``), ``stem.json`` (device, jax, the copy
    bandwidth and ``rows``) under ``out_dir``; with ``echo`` prints the table (its last
    len(rows) + 2 lines)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{stem}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, f"{stem}.json"), "w") as f:
        json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                       copy_tbs=copy_Bps / 1e12, rows=rows), f, indent=1)
    if echo:
        print("\n".join(lines[-(len(rows) + 2):]))


def sweep_parser(doc: str, max_seconds: float, quick_help: str) -> argparse.ArgumentParser:
    """The knob sweeps' common flags: --out (results folder), --max-seconds, --quick, --top."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(_REPO, "experiments", "results"))
    ap.add_argument("--max-seconds", type=float, default=max_seconds)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--top", type=int, default=3, help="phase-1 configs carried to phase 2")
    return ap


def report_failure(label: str, e: Exception) -> None:
    """A benchmark setting that failed (one that does not compile, say): its error, briefly, and
    a short traceback; the caller goes on with the next setting."""
    print(f"  {label}: {type(e).__name__}: {str(e)[:1500]}", flush=True)
    traceback.print_exc(limit=4)


def record_time(row: dict, name: str, seconds: float, nbytes: int, copy_Bps: float) -> None:
    """``row[name_us]`` and ``row[name_pct_copy]``: ``nbytes`` moved in ``seconds`` as % of the
    copy bandwidth ``copy_Bps``."""
    row[f"{name}_us"] = seconds * 1e6
    row[f"{name}_pct_copy"] = 100 * nbytes / seconds / copy_Bps


def report_copy_bandwidth(n_floats: int = 1 << 30) -> float:
    """:func:`copy_bandwidth_device`, printed with the device and jax version (bytes/s)."""
    bw = copy_bandwidth_device(n_floats)
    print(f"device {jax.devices()[0].device_kind}, jax {jax.__version__}, copy bandwidth "
          f"(device time) {bw / 1e12:.2f} TB/s", flush=True)
    return bw
