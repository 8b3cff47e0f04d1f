"""Input checks shared by the library and the kernels' wrappers: they name the bad input.

Values are checked only where they are concrete; inside a ``jit`` they are traced and unknown
until the program runs, so only shapes can be checked there.
"""

from __future__ import annotations

import jax
import numpy as np


def concrete(x) -> np.ndarray | None:
    """``x``'s values as a NumPy array, or None when ``x`` is traced (inside a ``jit``) or
    spread over processes (not all of it is on this host)."""
    if isinstance(x, jax.core.Tracer) or (isinstance(x, jax.Array)
                                         and not x.is_fully_addressable):
        return None
    return np.asarray(x)


def check_per_sequence(name: str, x, b: int, lo: int, hi: int, what: str) -> None:
    """ValueError unless ``x`` has shape ``(b,)`` and, where concrete, values in lo..hi
    (``what`` says what the bound is, for the message)."""
    if np.shape(x) != (b,):
        raise ValueError(f"{name} shape {np.shape(x)} != ({b},), one per sequence")
    check_range(name, x, lo, hi, what)


def check_range(name: str, x, lo: int, hi: int, what: str) -> None:
    """ValueError if concrete ``x`` holds a value outside lo..hi (``what`` names the bound; the
    message shows a vector's first values, a larger array's bad ones); traced ``x`` passes
    unchecked."""
    v = concrete(x)
    if v is not None and v.size and (v.min() < lo or v.max() > hi):
        shown = v if v.ndim == 1 else v[(v < lo) | (v > hi)]
        raise ValueError(f"{name} {shown.tolist()[:8]}{'...' if shown.size > 8 else ''} "
                         f"outside {lo}..{hi} ({what})")


def check_group_sizes(group_sizes, m: int | None = None) -> None:
    """ValueError unless concrete ``group_sizes`` are >= 0 and, with ``m``, sum to at most the
    ``m`` rows (traced ones, inside a jit, cannot be checked here). The kernels take sums past
    their rows as ``ragged_dot`` does (the last groups clipped), so they pass no ``m``; the
    model's ``ops.grouped_matmul``, whose groups partition the rows, passes them."""
    g = concrete(group_sizes)
    if g is not None and g.size and (g.min() < 0 or (m is not None and g.sum() > m)):
        bound = "" if m is None else f" and sum to at most the {m} rows"
        raise ValueError(f"group_sizes must be >= 0{bound}; got {g.tolist()[:8]}"
                         f"{'...' if g.size > 8 else ''} (sum {int(g.sum())})")
