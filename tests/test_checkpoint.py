"""trace_jax.checkpoint on small trees: the newest readable checkpoint wins, unreadable newer
ones are deleted once an older one restores, and a params-only read ignores the rest of the
state."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from trace_jax import checkpoint as C


def _state(v: float, stale: int = 1):
    return {"params": {"w": jnp.full((3, 4), v)}, "step": jnp.int32(int(v)),
            "stale": [{"w": jnp.zeros((3, 4))} for _ in range(stale)]}


def _corrupt(directory, step):
    for root, _, files in os.walk(os.path.join(directory, str(step))):
        for f in files:
            with open(os.path.join(root, f), "wb") as fh:
                fh.write(b"garbage")


def test_unreadable_newer_checkpoints_are_deleted_after_a_restore(tmp_path, capsys):
    """keep=2 with steps 1, 2 good and 3 corrupted: the restore takes step 2 and deletes step 3,
    so the next save leaves steps 2 and 4. Kept, step 3 would have counted toward keep and step
    4's save would have rotated out step 2, the last good one before it."""
    ck = C.Checkpointer(str(tmp_path), keep=3)
    for s in (1, 2, 3):
        ck.save(s, _state(s))
    _corrupt(tmp_path, 3)
    ck.close()
    ck = C.Checkpointer(str(tmp_path), keep=2)
    step, state = ck.restore_latest(C.abstract_like(_state(0)))
    assert step == 2 and float(state["params"]["w"][0, 0]) == 2.0
    assert "deleting checkpoint step 3" in capsys.readouterr().out
    ck.save(4, _state(4))
    ck.mngr.reload()
    assert sorted(ck.mngr.all_steps()) == [2, 4]
    ck.close()


def test_nothing_restores_raises_and_deletes_nothing(tmp_path):
    ck = C.Checkpointer(str(tmp_path))
    ck.save(1, _state(1))
    with pytest.raises(C.CheckpointMismatchError, match="none of the 1 checkpoints"):
        ck.restore_latest(C.abstract_like(_state(0, stale=2)))  # another state structure
    ck.mngr.reload()
    assert list(ck.mngr.all_steps()) == [1]
    ck.close()


def test_params_alone_restore_from_a_state_of_another_structure(tmp_path):
    """``restore_latest_params`` reads only the params entry: a state with two stale versions
    (and anything else) gives the same params; the newest readable step wins."""
    ck = C.Checkpointer(str(tmp_path))
    ck.save(1, _state(1, stale=2))
    ck.save(2, _state(2, stale=2))
    _corrupt(tmp_path, 2)
    abstract = C.abstract_like(_state(0)["params"])
    step, params = ck.restore_latest_params(abstract)
    assert step == 1
    np.testing.assert_array_equal(params["w"], np.full((3, 4), 1.0))
    with pytest.raises(C.CheckpointMismatchError):
        ck.restore_latest_params({"w": jax.ShapeDtypeStruct((5, 4), jnp.float32)})
    ck.close()
    assert C.Checkpointer(str(tmp_path / "empty")).restore_latest_params(abstract) == (None, None)
