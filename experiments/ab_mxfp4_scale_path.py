"""A/B of the MXFP4 attention kernel's scale conversion, side by side in one process (session 35).

  python experiments/ab_mxfp4_scale_path.py --out DIR [check_mgpu_attention.py ARGS ...]

Runs ``experiments/check_mgpu_attention.py --fmt mxfp4 --no-mosaic ARGS`` four times, in the
order select, fadd, select, fadd (so a drift of the machine shows as a difference between the two
runs of one path), writing DIR/{select,fadd,select2,fadd2}/kernels_attention_mgpu.{md,json}:

- ``select``: ``where(b == 255, nan, 2**(b - 127))``, a compare and a select per scale on the
  integer pipe (the only path before session 35; ~2.2 of 18.8 integer SASS per cache row at
  32-row tiles, ``attention_compilecheck``);
- ``fadd``: ``f + (f - f)`` (NaN from the inf that byte 255 gives, on the float pipe; 16.7
  integer SASS per row).

Each run forces one path with ``attention_triton.MXFP4_NAN_PATH``; without it the kernel picks
by tile rows (``attention_triton.mxfp4_nan_path``, chosen from this script's session-36 runs).
Both give the same bf16 values for every byte (``tests/test_kernels_attention.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_mgpu_attention as C  # noqa: E402

from pallas_kernels import attention_triton as AT  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a, rest = ap.parse_known_args(argv)
    rc = 0
    for label in ("select", "fadd", "select2", "fadd2"):
        AT.MXFP4_NAN_PATH = label.rstrip("2")
        jax.clear_caches()  # the kernel traces again with this path
        print(f"== {label}", flush=True)
        rc |= C.main(["--fmt", "mxfp4", "--no-mosaic", "--out", os.path.join(a.out, label)] + rest)
    AT.MXFP4_NAN_PATH = None
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
