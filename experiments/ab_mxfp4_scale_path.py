"""A/B of the MXFP4 attention kernel's scale conversion, side by side in one process (session 35).

  python experiments/ab_mxfp4_scale_path.py --out DIR [check_mgpu_attention.py ARGS ...]

Runs ``experiments/check_mgpu_attention.py --fmt mxfp4 --no-mosaic ARGS`` four times, in the
order select, fadd, select, fadd (so a drift of the machine shows as a difference between the two
runs of one path), writing DIR/{select,fadd,select2,fadd2}/kernels_attention_mgpu.{md,json}:

- ``select``: the conversion before session 35, ``where(b == 255, nan, 2**(b - 127))``, a
  compare and a select per scale on the integer pipe (~2.2 of 18.8 integer SASS per cache row,
  ``attention_compilecheck``);
- ``fadd``: :func:`pallas_kernels.attention_triton._scale_bf16` as shipped, ``f + (f - f)``
  (NaN from the inf that byte 255 gives, on the float pipe; 16.7 integer SASS per row).

Both give the same bf16 values for every byte (``tests/test_kernels_attention.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_mgpu_attention as C  # noqa: E402

from pallas_kernels import attention_triton as AT  # noqa: E402

_SHIPPED = AT._scale_bf16


def scale_bf16_select(s_u8, fmt):
    """The pre-session-35 conversion (MXFP4 with a compare and select; NVFP4 unchanged)."""
    if fmt != "mxfp4":
        return _SHIPPED(s_u8, fmt)
    b = s_u8.astype(jnp.uint32)
    sf = jax.lax.bitcast_convert_type(b << 23, jnp.float32)
    sf = jnp.where(b == 255, jnp.nan, sf)
    return (sf * float(2.0 ** AT.KSHIFT[fmt])).astype(jnp.bfloat16)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    a, rest = ap.parse_known_args(argv)
    paths = {"select": scale_bf16_select, "fadd": _SHIPPED}
    rc = 0
    for label in ("select", "fadd", "select2", "fadd2"):
        AT._scale_bf16 = paths[label.rstrip("2")]
        jax.clear_caches()  # the kernel traces again with this path
        print(f"== {label}", flush=True)
        rc |= C.main(["--fmt", "mxfp4", "--no-mosaic", "--out", os.path.join(a.out, label)] + rest)
    AT._scale_bf16 = _SHIPPED
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
