"""Orbax checkpoints of the whole run state: saved atomically every N steps, keeping the last K;
restore takes the newest checkpoint that reads back completely and skips (with a warning) any
that is incomplete or corrupted, deleting it once an older one has restored. When checkpoints
exist and none of them restores (a config that changed the state's shapes, unreadable storage),
restore raises rather than let a fresh run overwrite them."""

from __future__ import annotations

import logging
import os

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


class Checkpointer:
    def __init__(self, directory: str, keep: int = 3):
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.mngr = ocp.CheckpointManager(
            self.directory, item_handlers=ocp.StandardCheckpointHandler(),  # (item_metadata)
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                 enable_async_checkpointing=False))

    def save(self, step: int, state) -> None:
        """Save synchronously; the step directory appears only once complete (atomic rename).
        A checkpoint already at ``step`` (one that failed to restore and is being redone) is
        replaced."""
        self.mngr.reload()
        if step in self.mngr.all_steps():
            self.mngr.delete(step)
        self.mngr.save(step, args=ocp.args.StandardSave(state), force=True)
        self.mngr.wait_until_finished()

    def restore_latest(self, abstract_state, defaults: dict | None = None):
        """(step, state) from the newest checkpoint that restores into ``abstract_state``, or
        (None, None) if the directory holds none. Raises :class:`CheckpointMismatchError` when
        there are checkpoints but none restores. ``defaults``: top-level entries of the state
        that older checkpoints may lack, each with the value such a checkpoint restores with.
        Newer checkpoints that did not restore are deleted once one has: they count toward
        ``keep`` and would otherwise outlive the good ones the resumed run's saves rotate out."""

        def read(step):
            saved = self.mngr.item_metadata(step) if defaults else {}
            missing = {k: v for k, v in (defaults or {}).items()
                       if k in abstract_state and k not in saved}
            abstract = {k: v for k, v in abstract_state.items() if k not in missing}
            return {**self.mngr.restore(step, args=ocp.args.StandardRestore(abstract)), **missing}

        step, state, skipped = self._newest(read, "this run's state")
        for bad in skipped:
            if jax.process_index() == 0:
                print(f"WARNING: deleting checkpoint step {bad}, which does not restore; the run "
                      f"resumes from step {step}", flush=True)
            self.mngr.delete(bad)
        return step, state

    def restore_latest_params(self, abstract_params, step: int | None = None):
        """(step, params) from the newest checkpoint (or the one at ``step``) whose ``params``
        entry restores into ``abstract_params``, reading that entry alone (the optimizer state,
        stale versions and KL reference may have any structure), or (None, None) if there are
        no checkpoints. Raises :class:`CheckpointMismatchError` when there are some and none
        restores, FileNotFoundError for a ``step`` that has none."""
        item = {"params": abstract_params}
        args = ocp.args.PyTreeRestore(
            item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
            partial_restore=True)
        reader = ocp.CheckpointManager(self.directory,
                                       item_handlers=ocp.PyTreeCheckpointHandler())

        def read(step):
            out = reader.restore(step, args=args)
            got = jax.tree.map(lambda a: (tuple(a.shape), a.dtype), out)
            want = jax.tree.map(lambda a: (tuple(a.shape), a.dtype), item)
            if got != want:  # (a target without shardings reads numpy arrays as stored)
                raise ValueError("stored params differ in shape or dtype from the requested ones")
            return out

        try:
            step, out, _ = self._newest(read, "this config's params", only=step)
        finally:
            reader.close()
        return step, None if out is None else out["params"]

    def _newest(self, read, what: str, only: int | None = None):
        """(step, read(step), newer steps whose read failed) for the newest step that reads
        (only step ``only`` if given), or (None, None, []) without checkpoints."""
        self.mngr.reload()
        failures, skipped = [], []
        steps = sorted(self.mngr.all_steps(), reverse=True)
        if only is not None:
            if only not in steps:
                raise FileNotFoundError(f"no checkpoint at step {only} in {self.directory} "
                                        f"(steps there: {sorted(steps)})")
            steps = [only]
        for step in steps:
            try:
                return step, read(step), skipped
            except Exception as e:  # noqa: BLE001 - any read failure means unusable
                failures.append(f"step {step}: {type(e).__name__}: {str(e)[:300]}")
                skipped.append(step)
                log.warning("checkpoint %s/%d does not restore into %s (%s: %s); skipping it",
                            self.directory, step, what, type(e).__name__, str(e)[:200])
                if jax.process_index() == 0:
                    print(f"WARNING: skipping checkpoint step {step}: incomplete, corrupted or "
                          f"not shaped like {what} ({type(e).__name__}: {str(e)[:120]})",
                          flush=True)
        if failures:
            raise CheckpointMismatchError(
                f"none of the {len(failures)} checkpoints in {self.directory} restores into "
                f"{what}, so the run cannot resume, and starting fresh would overwrite them. "
                f"A config that changes the state (model shapes, param_dtype, train.kl_coef, "
                f"train.max_version_diff) needs a new workdir; to start over, remove "
                f"{self.directory}. Errors: " + "; ".join(failures))
        return None, None, []

    def close(self):
        self.mngr.close()


class CheckpointMismatchError(RuntimeError):
    """Checkpoints exist, and none restores into the requested state."""


def abstract_like(tree):
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def load_params(path: str, config, shardings=None):
    """Trainer params from a run directory (its checkpoints/) or a checkpoints directory, from the
    newest checkpoint that reads back completely, or from one checkpoint (``.../<step>``, a
    folder of a checkpoints directory); read straight into ``shardings`` (a tree like the
    params', e.g. a mesh placement's) if given, else onto this process's first device."""
    from trace_jax import experiment as X
    from trace_jax import run as RUN

    p, step = os.path.normpath(path), None
    name, parent = os.path.basename(p), os.path.dirname(p)
    if (name.isdigit() and not os.path.isdir(os.path.join(p, "checkpoints"))
            and os.path.isdir(parent) and not os.path.isdir(os.path.join(parent, "checkpoints"))):
        d, step = parent, int(name)  # one checkpoint: <checkpoints dir>/<step>
    else:
        d = os.path.join(p, "checkpoints") if os.path.isdir(os.path.join(p, "checkpoints")) else p
    if not os.path.isdir(d):
        raise FileNotFoundError(f"no checkpoint directory at {path!r}")
    exp, tc = X.build(config), RUN.train_config(config)
    # whatever mesh or process count saved it
    shapes = jax.eval_shape(lambda: RUN.initial_state(exp, config, tc))["params"]
    if shardings is None:
        shardings = jax.tree.map(
            lambda _: jax.sharding.SingleDeviceSharding(jax.local_devices()[0]), shapes)
    abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                            shapes, shardings)
    ck = Checkpointer(d)
    try:
        step, params = ck.restore_latest_params(abstract, step)
    except CheckpointMismatchError as e:  # (its advice is the training loop's; this only reads)
        raise ValueError(
            f"no checkpoint under {d!r} holds params of this config's model: pass the config the "
            f"run was trained with (its workdir's config.json lists it). Checkpoint errors: "
            f"{str(e).split('Errors: ', 1)[-1]}") from None
    finally:
        ck.close()
    if params is None:
        raise FileNotFoundError(f"no complete, readable checkpoint under {d!r}")
    return params
