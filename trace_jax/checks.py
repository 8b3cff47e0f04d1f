"""Input checks shared by the library and the kernels' wrappers: they name the bad input.

Values are checked only where they are concrete; inside a ``jit`` they are traced and unknown
until the program runs, so only shapes can be checked there.
"""

from __future__ import annotations

import jax
import numpy as np


def concrete(x) -> np.ndarray | None:
    """``x``'s values as a NumPy array, or None when ``x`` is traced (inside a ``jit``)."""
    return None if isinstance(x, jax.core.Tracer) else np.asarray(x)


def check_per_sequence(name: str, x, b: int, lo: int, hi: int, what: str) -> None:
    """ValueError unless ``x`` has shape ``(b,)`` and, where concrete, values in lo..hi
    (``what`` says what the bound is, for the message)."""
    if np.shape(x) != (b,):
        raise ValueError(f"{name} shape {np.shape(x)} != ({b},), one per sequence")
    v = concrete(x)
    if v is not None and v.size and (v.min() < lo or v.max() > hi):
        raise ValueError(f"{name} {v.tolist()[:8]} outside {lo}..{hi} ({what})")
