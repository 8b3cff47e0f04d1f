"""trace_jax.checks: per-sequence vectors are checked by shape always, by value when concrete."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax.checks import check_per_sequence, concrete


def test_per_sequence_shapes_always_values_when_concrete():
    check_per_sequence("lengths", np.array([1, 8]), 2, 1, 8, "rows")
    with pytest.raises(ValueError, match=r"lengths \[0, 9\] outside 1..8 \(rows\)"):
        check_per_sequence("lengths", jnp.array([0, 9]), 2, 1, 8, "rows")
    with pytest.raises(ValueError, match=r"lengths shape \(3,\) != \(2,\)"):
        check_per_sequence("lengths", [1, 2, 3], 2, 1, 8, "rows")

    @jax.jit
    def traced(x):  # values unknown inside the jit: only the shape is checked
        assert concrete(x) is None
        check_per_sequence("lengths", x, 2, 1, 8, "rows")
        with pytest.raises(ValueError, match="shape"):
            check_per_sequence("lengths", x, 3, 1, 8, "rows")
        return x

    np.testing.assert_array_equal(traced(jnp.array([0, 99])), [0, 99])


def test_group_sizes_nonnegative_and_within_the_rows_when_asked():
    from trace_jax.checks import check_group_sizes

    check_group_sizes(np.array([2, 0, 4]), 6)
    check_group_sizes(np.array([4, 4]))  # no row count: the kernels' clipping contract
    with pytest.raises(ValueError, match=r"sum to at most the 6 rows; got \[4, 4\] \(sum 8\)"):
        check_group_sizes(np.array([4, 4]), 6)
    with pytest.raises(ValueError, match=r"group_sizes must be >= 0; got \[-1, 7\]"):
        check_group_sizes(np.array([-1, 7]))


def test_range_named_when_concrete_unchecked_when_traced():
    from trace_jax.checks import check_range

    check_range("token ids", np.array([[0, 47]]), 0, 47, "the vocabulary")
    with pytest.raises(ValueError, match=r"token ids \[48, -1\] outside 0..47 \(the vocabulary\)"):
        check_range("token ids", jnp.array([[3, 48], [-1, 0]]), 0, 47, "the vocabulary")
    jax.jit(lambda x: check_range("token ids", x, 0, 47, "v") or x)(jnp.array([99]))
