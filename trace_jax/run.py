"""The main job: supervised warm start, then GRPO with FP4 rollouts and (for ``trace``) hint-guided
FP4 QAT. ``python -m trace_jax.main --config=configs/tiny.py [--config.workdir=DIR]``.

Writes ``DIR/metrics.jsonl`` (one object per RL step), TensorBoard events under ``DIR/tb`` and
orbax checkpoints under ``DIR/checkpoints``; rerunning the same command resumes from the newest
complete checkpoint and continues the trajectory an uninterrupted run would have taken (data
position and PRNG keys are functions of the step number).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from trace_jax import checkpoint as C
from trace_jax import distributed as D
from trace_jax import experiment as X
from trace_jax import grpo
from trace_jax import model as M
from trace_jax import rollout as R
from trace_jax import sharding as SH
from trace_jax import tasks
from trace_jax import train as TR

METRIC_KEYS = ("step", "reward_mean", "accuracy", "response_len_mean", "entropy",
               "logprob_gap_max", "logprob_gap_mean", "kl_k3", "is_clip_frac",
               "code_agreement_hinted", "code_agreement_unhinted", "routing_agreement",
               "hint_bytes_per_token", "time_rollout_s", "time_train_s", "time_sync_s")
# run-state entries that older checkpoints lack, with the value such a checkpoint restores with
STATE_DEFAULTS = {"nonfinite": 0}


def train_config(config) -> TR.TrainConfig:
    t = dict(config.train)
    g = {f.name: t.pop(f.name) for f in dataclasses.fields(grpo.GRPOConfig) if f.name in t}
    known = {f.name for f in dataclasses.fields(TR.TrainConfig)}
    unknown = sorted(set(t) - known)
    if unknown:
        raise ValueError(f"unknown train config fields {unknown}")
    return TR.TrainConfig(grpo=grpo.GRPOConfig(**g), **t)


def validate(config, exp: X.Experiment, tc: TR.TrainConfig):
    """Impossible combinations fail before any compute, naming the field."""
    if exp.variant.hints and not exp.train_numerics.hinted:
        raise ValueError("variant='trace' needs hinted sites, but numerics.hint_sites/"
                         "numerics.hint_layers select none")
    if exp.variant.rollout_mode != "bf16" and not exp.rollout_numerics.quantized:
        raise ValueError(f"variant={config.variant!r} needs FP4 rollout, but numerics.sites is empty")
    if exp.group_size < 2:
        raise ValueError(f"rollout.group_size must be >= 2 for group-normalised advantages, "
                         f"got {exp.group_size}")
    for name, value in (("train.micro_batches", tc.micro_batches),
                        ("checkpoint.every", config.checkpoint.every),
                        ("checkpoint.keep", config.checkpoint.keep)):
        if value < 1:  # (keep=0 would delete every checkpoint as it is written)
            raise ValueError(f"{name} must be >= 1, got {value}")
    n_traj = config.rollout.batch_prompts * exp.group_size
    if n_traj % tc.micro_batches:
        raise ValueError(f"rollout.batch_prompts * rollout.group_size = {n_traj} is not divisible "
                         f"by train.micro_batches={tc.micro_batches}")
    if config.sft.steps < 0 or tc.steps < 0:
        raise ValueError("sft.steps and train.steps must be >= 0")
    for name, value in (("train.warmup_steps", tc.warmup_steps),
                        ("sft.warmup_steps", config.sft.warmup_steps)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    for name, value in (("train.lr", tc.lr), ("sft.lr", config.sft.lr),
                        ("train.grad_clip", tc.grad_clip)):
        if not value > 0:  # (also NaN)
            raise ValueError(f"{name} must be > 0, got {value}")
    if config.sft.numerics not in SFT_NUMERICS:
        raise ValueError(f"sft.numerics must be one of {SFT_NUMERICS}, got "
                         f"{config.sft.numerics!r}")
    if config.sft.steps and config.sft.batch_size < 1:
        raise ValueError(f"sft.batch_size must be >= 1, got {config.sft.batch_size}")
    for name in ("model.dtype", "model.param_dtype"):
        value = config.model[name.split(".")[1]]
        if value not in ("bfloat16", "float32", "float16"):
            raise ValueError(f"{name} must be 'bfloat16', 'float32' or 'float16', got {value!r}")
    if tc.max_version_diff < 0:
        raise ValueError("train.max_version_diff must be >= 0")
    if X.rollout_kernel_layout(config) == "mosaic" and exp.rollout_numerics.is_fp4:
        from pallas_kernels.fp4_matmul import mosaic_fits

        fmt, d, f = exp.rollout_numerics.fmt, exp.cfg.d_model, exp.cfg.d_expert
        if not (mosaic_fits(fmt, d, f) and mosaic_fits(fmt, f, d)):
            raise ValueError(f"rollout.expert_kernel='mosaic' takes nvfp4 experts with d_model "
                             f"and d_expert multiples of 64; this run has {fmt}, d_model={d}, "
                             f"d_expert={f} (use 'auto' or 'triton')")
    s = exp.sampling
    if tc.steps and (s.temperature != 1.0 or s.top_k or s.top_p < 1.0):
        raise ValueError(
            f"rollout.temperature={s.temperature}, top_k={s.top_k}, top_p={s.top_p}: the GRPO "
            f"loss and its importance weights treat the responses as samples of the policy "
            f"itself (temperature 1, no truncation), so RL runs sample that way; evaluation "
            f"(experiments/evaluate.py) takes its own sampling settings")
    init_from = config.get("init_from", "")  # (read only by a fresh start: warm_start_params)
    if init_from and config.sft.steps:
        raise ValueError(f"init_from={init_from!r} starts from that run's params in place of the "
                         f"SFT warm start; set sft.steps=0 (it is {config.sft.steps})")


SFT_NUMERICS = ("bf16", "trainer")


def sft_numerics(config, exp: X.Experiment):
    """The numerics of the SFT warm start (``sft.numerics``): BF16, or the trainer's without
    hints (SFT has no rollout to take them from). Session 44's tiny headline study: with the
    trainer's W4A4 numerics the RTN / TRACE runs started RL lower and ended 0.03-0.14 below BF16
    in every seed; from one BF16 SFT they ended level with it."""
    num = exp.train_numerics.with_mode("bf16") if config.sft.numerics == "bf16" \
        else exp.train_numerics
    return dataclasses.replace(num, hinted=frozenset())


def warm_start_params(config, pl: Placement | None):
    """The trainer params of the finished run ``config.init_from`` (its newest readable
    checkpoint), placed like a fresh run's params; its model must match this config's, and its
    held-out split must not have trained on this run's (:func:`check_warm_start_split`)."""
    src = config.init_from
    if not os.path.isdir(src):
        raise FileNotFoundError(f"init_from={src!r}: no such run directory")
    check_warm_start_split(src, config)
    try:
        params = C.load_params(src, config, None if pl is None else pl.params)
    except Exception as e:  # none there, or none whose params fit this config's model
        raise ValueError(f"init_from={src!r}: no checkpoint there holds params of this config's "
                         f"model ({type(e).__name__}: {e})") from e
    return params


def check_warm_start_split(src: str, config) -> None:
    """Raise a ValueError if the run in ``src`` (same task) may have trained on problems that
    ``config`` holds out. The split is a fixed function of each problem's key
    (:func:`tasks.split_of`), so this run's held-out set lies inside the source's exactly when
    both split by the same key and this run holds out no larger a fraction (or none at all).
    A source without config.json (a bare checkpoints folder) is not checked."""
    path = os.path.join(src, "config.json")
    frac = config.task.get("eval_fraction", tasks.EVAL_FRACTION)
    if not frac or not os.path.exists(path):
        return
    with open(path) as f:
        saved = json.load(f).get("task", {})
    if saved.get("name") != config.task.name:
        return  # another task's problems: none of them is held out here
    # (configs saved before sessions 37 / 41 lack the fields: ADDED_FIELDS' values)
    src_frac = saved.get("eval_fraction", ADDED_FIELDS["task.eval_fraction"])
    src_by = saved.get("split_by", ADDED_FIELDS["task.split_by"])
    by = config.task.get("split_by", "prompt")
    if src_by != by or frac > src_frac:
        raise ValueError(
            f"init_from={src!r} trained on task {saved.get('name')!r} holding out "
            f"eval_fraction={src_frac} split by {src_by!r}; this run holds out "
            f"eval_fraction={frac} split by {by!r}, so some of its held-out problems were "
            f"trained on (by SFT or RL) in the source run. Use the source's task.split_by "
            f"and an eval_fraction <= {src_frac}, or start without init_from")
@dataclasses.dataclass(frozen=True)
class Placement:
    """Where state lives on a multi-device mesh: trainer params/optimizer by the training rules
    (FSDP), rollout params by the sampling rules, trajectories by batch."""

    mesh: object
    train_rules: dict
    sample_rules: dict
    params: object  # NamedShardings of the trainer params
    rollout_params: object  # NamedShardings of sync_weights' output

    def put_params(self, tree):
        return jax.device_put(tree, self.params)

    def put_batch(self, tree, batch: int):
        """Host (numpy) trajectories, identical on every process, split by trajectory; each
        process places only its own shards (multi-host safe)."""
        return D.put_global(tree, SH.trajectory_shardings(tree, self.mesh, self.train_rules, batch))


def make_placement(config, exp: X.Experiment) -> Placement | None:
    """None on a one-device mesh (everything stays on the default device)."""
    shape = tuple(config.mesh.shape)
    if jax.process_count() > 1 and -1 not in shape and int(np.prod(shape)) != jax.device_count():
        raise ValueError(f"mesh.shape {shape} covers {int(np.prod(shape))} of the "
                         f"{jax.device_count()} devices of {jax.process_count()} processes; a "
                         f"multi-process run needs a mesh over all of them (use -1)")
    if -1 not in shape and int(np.prod(shape)) == 1:
        return None
    # an explicit shape uses the first devices; -1 takes all of them
    devices = None if -1 in shape else jax.devices()[: int(np.prod(shape))]
    mesh = SH.make_mesh(config.mesh, devices=devices)
    if mesh.size == 1:
        return None
    tr, sa = SH.rules_from_config(config.mesh, "training"), SH.rules_from_config(config.mesh, "sampling")
    n = config.rollout.batch_prompts * exp.group_size
    batches = [("rollout.batch_prompts * rollout.group_size", n)]
    if config.sft.steps:  # (an init_from run has no SFT batches)
        batches.append(("sft.batch_size", config.sft.batch_size))
    mb = config.train.micro_batches
    if mb > 1 and config.train.steps:  # (each micro-batch is split over the batch axes)
        batches.append(("rollout.batch_prompts * rollout.group_size / train.micro_batches",
                        n // mb))
    for field, batch in batches:
        try:
            SH.check_batch_divisible(batch, mesh, tr)
        except ValueError as e:
            raise ValueError(f"{field} = {batch}: {e}") from e
    n_expert = dict(mesh.shape).get("expert", 1)
    if exp.cfg.n_experts % n_expert:
        raise ValueError(f"model.n_experts = {exp.cfg.n_experts} does not split over the mesh's "
                         f"expert axis of {n_expert} devices (mesh.shape)")
    kl = X.rollout_kernel_layout(config)
    return Placement(mesh, tr, sa, SH.param_shardings(exp.cfg, mesh, tr),
                     SH.rollout_param_shardings(exp.cfg, mesh, sa, exp.rollout_numerics,
                                                dtype=exp.cfg.dtype, kernel_layout=kl))


def _on_one_device(tree):
    """``tree`` committed to the first local device, as a restored checkpoint's arrays are.
    Jit compiles committed and uncommitted inputs separately: with a fresh state committed too,
    a run resumed in the same process (tests, notebooks) reuses the fresh run's programs, and
    no step sees a mix of the two (a fresh optimizer's step count next to committed params)."""
    return jax.device_put(tree, jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))


def opt_init(opt, params, pl: Placement | None):
    """Optimizer state for ``params``: moments follow the params' shardings, scalars (step
    counts) are replicated over the mesh; without a mesh all of it is committed to the first
    local device (:func:`place_state`)."""
    state = opt.init(params)
    if pl is None:
        return _on_one_device(state)
    rep = jax.sharding.NamedSharding(pl.mesh, jax.sharding.PartitionSpec())

    def fix(x):
        sh = getattr(x, "sharding", None)
        on_mesh = isinstance(sh, jax.sharding.NamedSharding) and sh.mesh == pl.mesh
        return x if on_mesh else D.put_global(np.asarray(x), rep)  # multi-host safe

    return jax.tree.map(fix, state)


def place_state(state: dict, pl: Placement | None, opt) -> dict:
    """Put a fresh run state on the mesh (a restored one takes the fresh state's shardings);
    without a mesh, committed to the first local device as a restored checkpoint's arrays are,
    so the first steps and a resumed run reuse one compiled program (:func:`_on_one_device`)."""
    if pl is None:
        return _on_one_device(state)
    out = dict(state)
    out["params"] = pl.put_params(state["params"])  # (already there when built by initial_state)
    out["opt_state"] = opt_init(opt, out["params"], pl)
    out["stale"] = [pl.put_params(p) for p in state["stale"]]
    if "ref" in state:
        out["ref"] = pl.put_params(state["ref"])
    return out


# Config fields a resumed run may change: its checkpoint cadence, device layout, memory split and
# stopping rule. Any other difference from the run's config.json is another experiment; that
# includes train.steps, which sets the learning-rate schedule's cosine horizon.
RESUMABLE = ("train.micro_batches", "train.max_nonfinite_steps", "checkpoint.", "distributed.",
             "mesh.", "workdir", "init_from")
# Free-form dicts: an entry that only one side has is a difference (a task option added or dropped).
FREE_FORM = ("task.kwargs.",)


class _Absent:
    def __repr__(self):
        return "(absent)"


_ABSENT = _Absent()


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


# Fields added after runs were saved whose absence means what the code did before them: a saved
# config without one is compared as if it held this value.
ADDED_FIELDS = {"task.eval_fraction": tasks.EVAL_FRACTION, "task.split_by": "prompt",
                "sft.numerics": "trainer"}  # (runs before session 44 SFT'd with the trainer's)


def check_resume_config(workdir: str, config, step: int | None = None) -> None:
    """Raise a ValueError naming the fields, if ``workdir``'s config.json (the run being resumed)
    differs from ``config`` outside :data:`RESUMABLE`. ``train.steps`` may change too while the
    checkpoint being resumed (global ``step``) has taken no RL step: an SFT-only run continued
    with RL has not used the schedule yet. A field the saved config lacks is compared
    as its :data:`ADDED_FIELDS` value where it has one (a run from before it split by prompt
    text); an entry of a :data:`FREE_FORM` dict that one side lacks is a difference; other fields
    only one side has (schema fields of another code version) are not compared. A workdir without
    config.json is not checked."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        saved = _flat(json.load(f))
    now = _flat(json.loads(config.to_json_best_effort()))
    saved = {**{k: v for k, v in ADDED_FIELDS.items() if k in now}, **saved}
    keys = (saved.keys() & now.keys()) | {k for k in saved.keys() ^ now.keys()
                                          if k.startswith(FREE_FORM)}
    resumable = RESUMABLE + (("train.steps",) if step is not None and step <= config.sft.steps
                             else ())
    diff = sorted(k for k in keys if saved.get(k, _ABSENT) != now.get(k, _ABSENT)
                  and not k.startswith(resumable))
    if diff:
        shown = ", ".join(f"{k}: {saved.get(k, _ABSENT)!r} -> {now.get(k, _ABSENT)!r}"
                          for k in diff[:5])
        steps = (" train.steps sets the learning-rate schedule (warmup-cosine over train.steps), "
                 "so a run cannot be lengthened in place: to train a finished run further, start "
                 "a new workdir with --config.init_from=" + workdir + " --config.sft.steps=0."
                 if "train.steps" in diff else "")
        raise ValueError(
            f"{workdir} holds a run with another config ({shown}{', ...' if len(diff) > 5 else ''}"
            f"); resuming it would mix two experiments. Use a new --config.workdir, or the run's "
            f"own config (a resume may change only {', '.join(RESUMABLE)}).{steps}")


def workdir_of(config) -> str:
    return config.workdir or os.path.join("runs", "default")


def initial_state(exp: X.Experiment, config, tc: TR.TrainConfig, pl: Placement | None = None,
                  params=None):
    """A fresh run state: ``params`` (a warm start) or a random init, a fresh RL optimizer;
    ``nonfinite`` counts the consecutive non-finite steps up to ``step``."""
    if params is None:
        key = jax.random.key(config.seed)
        # jitted on one device and on a mesh alike (identical values; eager init rounds
        # differently), built in place on the (possibly multi-host) mesh
        params = jax.jit(lambda k: M.init_params(exp.cfg, k),
                         out_shardings=None if pl is None else pl.params)(key)
    opt = rl_optimizer(tc)
    # own buffers for the stale versions and the KL reference: the train step donates params
    state = {"params": params, "opt_state": opt.init(params), "step": jnp.int32(0),
             "nonfinite": jnp.int32(0),
             "stale": [_copy(params) for _ in range(tc.max_version_diff)]}
    if tc.grpo.kl_coef:
        state["ref"] = _copy(params)
    return state


def abstract_state(exp: X.Experiment, config, tc: TR.TrainConfig,
                   pl: Placement | None) -> dict:
    """Shapes, dtypes and shardings of ``place_state(initial_state(...))`` without building it:
    a resume restores into this, so it never holds a fresh state beside the restored one."""
    shapes = jax.eval_shape(lambda: initial_state(exp, config, tc))

    def put(x, sharding):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    first = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    if pl is None:  # (place_state commits everything to the first local device)
        return jax.tree.map(lambda x: put(x, first), shapes)
    rep = jax.sharding.NamedSharding(pl.mesh, jax.sharding.PartitionSpec())

    def like_params(tree):
        return jax.tree.map(put, tree, pl.params)

    # step and nonfinite on the first local device, as initial_state leaves them
    out = {k: jax.tree.map(lambda x: put(x, first), v) for k, v in shapes.items()}
    out["params"] = like_params(shapes["params"])
    # opt_init: the moments follow the params' shardings, everything else is replicated
    out["opt_state"] = optax.tree_map_params(rl_optimizer(tc), put, shapes["opt_state"], pl.params,
                                             transform_non_params=lambda x: put(x, rep))
    out["stale"] = [like_params(p) for p in shapes["stale"]]
    if "ref" in shapes:
        out["ref"] = like_params(shapes["ref"])
    return out


def rl_optimizer(tc: TR.TrainConfig):
    return TR.make_optimizer(tc.lr, tc.warmup_steps, tc.steps, tc.weight_decay, tc.grad_clip)


def sft_optimizer(config):
    s = config.sft
    return TR.make_optimizer(s.lr, s.warmup_steps, max(s.steps, 1), 0.0, 1.0)


def sft_batch(exp: X.Experiment, step: int, batch_size: int):
    """BOS + prompt + solution + EOS, right-padded; the loss covers solution and EOS."""
    d = exp.train_data
    examples = tasks.Dataset(exp.task, batch_size, d.seed + 7919, "train", d.eval_fraction,
                             d.split_by).batch(step)
    T = exp.prompt_width + exp.sampling.max_new_tokens
    toks = np.full((len(examples), T), exp.tokenizer.pad_id, np.int32)
    mask = np.zeros((len(examples), T), bool)
    for i, e in enumerate(examples):
        p = exp.tokenizer.encode(e.prompt, add_bos=True)
        s = exp.tokenizer.encode(e.solution, add_eos=True)
        if len(p) + len(s) > T:  # (a cut target would teach the policy never to stop)
            raise ValueError(
                f"SFT target of {e.prompt!r} is {len(s)} tokens with EOS, more than the "
                f"{T - len(p)} that rollout.max_new_tokens={exp.sampling.max_new_tokens} leaves "
                f"after its prompt; raise rollout.max_new_tokens")
        toks[i, : len(p) + len(s)] = p + s
        mask[i, len(p): len(p) + len(s)] = True
    return jnp.asarray(toks), jnp.asarray(mask)


def log(msg: str) -> None:
    if D.is_main_process():
        print(msg, flush=True)


class NullLogger:
    """The logger of processes other than 0."""

    def write(self, m: dict, prefix="rl"):
        pass

    def close(self):
        pass


class Logger:
    """metrics.jsonl (RL steps) and TensorBoard (``sft/*`` by global step, ``rl/*`` by RL step).
    ``resume_at`` maps each prefix to the first step this run writes: the lines and TensorBoard
    points a crashed run wrote at or past it (after its last checkpoint) are dropped first, so
    every step is there once."""

    def __init__(self, workdir: str, resume_at: dict[str, int]):
        self.path = os.path.join(workdir, "metrics.jsonl")
        if os.path.exists(self.path):
            keep = []
            with open(self.path) as f:
                for line in f:
                    try:
                        if json.loads(line)["step"] < resume_at["rl"]:
                            keep.append(line)
                    except (json.JSONDecodeError, KeyError):
                        break  # a torn last line from a crash
            _replace_file(self.path, b"".join(line.encode() for line in keep))
        tb = os.path.join(workdir, "tb")
        if os.path.isdir(tb):
            drop_tensorboard_points(tb, resume_at)
        from tensorboardX import SummaryWriter
        # (tensorboardX names its file by the second and overwrites a file of that name: a run
        # resumed within the second of the last one would erase its points without the suffix)
        self.tb = SummaryWriter(tb, filename_suffix=f".{time.time_ns()}")

    def write(self, m: dict, prefix="rl"):
        if prefix == "rl":
            with open(self.path, "a") as f:
                f.write(json.dumps(m) + "\n")
        for k, v in m.items():
            if k != "step" and isinstance(v, (int, float)) and np.isfinite(v):
                self.tb.add_scalar(f"{prefix}/{k}", v, m["step"])
        self.tb.flush()

    def close(self):
        self.tb.close()


def _event_records(path: str) -> list[tuple[bytes, bytes]]:
    """(record, Event bytes) of each complete TFRecord of an event file, up to the first one a
    crash left torn or unwritten (short, or failing its length's or data's CRC)."""
    from tensorboardX.record_writer import masked_crc32c

    with open(path, "rb") as f:
        data = f.read()
    out, i = [], 0
    while i + 12 <= len(data):
        header, (crc,) = data[i: i + 8], struct.unpack("<I", data[i + 8: i + 12])
        (n,) = struct.unpack("<Q", header)
        if crc != masked_crc32c(header) or i + 16 + n > len(data):
            break
        body, (crc,) = data[i + 12: i + 12 + n], struct.unpack("<I", data[i + 12 + n: i + 16 + n])
        if crc != masked_crc32c(body):
            break
        out.append((data[i: i + 16 + n], body))
        i += 16 + n
    return out


def drop_tensorboard_points(tb_dir: str, resume_at: dict[str, int]) -> None:
    """Rewrite each event file in ``tb_dir`` (atomically) without the scalar points of tags
    ``prefix/...`` at steps >= ``resume_at[prefix]`` and without a record torn by a crash."""
    from tensorboardX.proto import event_pb2

    for name in os.listdir(tb_dir):
        path = os.path.join(tb_dir, name)
        if "tfevents" not in name or not os.path.isfile(path):
            continue
        keep = []
        for record, body in _event_records(path):
            ev = event_pb2.Event.FromString(body)
            if all(ev.step < resume_at.get(v.tag.split("/")[0], ev.step + 1)
                   for v in ev.summary.value):
                keep.append(record)
        _replace_file(path, b"".join(keep))


def _replace_file(path: str, data: bytes) -> None:
    """Replace ``path``'s contents with ``data`` atomically: a crash leaves the old file or the
    new one, never a truncated one. (The temporary name holds no "tfevents": TensorBoard reads
    every file that does.)"""
    tmp = os.path.join(os.path.dirname(path), ".rewrite.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run(config) -> dict:
    """Run (or resume) the configured job; returns the last RL metrics."""
    tc = train_config(config)
    exp = X.build(config)
    validate(config, exp, tc)
    workdir = workdir_of(config)
    os.makedirs(workdir, exist_ok=True)

    ckpt = C.Checkpointer(os.path.join(workdir, "checkpoints"), keep=config.checkpoint.keep)
    placement = make_placement(config, exp)
    # restoring into a fresh state's shardings also reshards a checkpoint from another mesh
    step0, state = ckpt.restore_latest(abstract_state(exp, config, tc, placement),
                                       defaults=STATE_DEFAULTS)
    if state is None:
        step0 = 0
        params = warm_start_params(config, placement) if config.get("init_from", "") else None
        state = place_state(initial_state(exp, config, tc, placement, params=params),
                            placement, rl_optimizer(tc))
        log(f"starting {config.variant} run in {workdir}"
            + (f" from the params of {config.init_from}" if params is not None else ""))
    else:
        check_resume_config(workdir, config, step0)
        log(f"resumed from checkpoint step {step0} in {workdir}")
    main = D.is_main_process()  # only process 0 writes metrics / TensorBoard / the progress bar
    if main:  # (after the restore: a run that cannot resume leaves config.json as it was)
        # (atomically: the other processes of a resumed run may be reading it to compare)
        _replace_file(os.path.join(workdir, "config.json"),
                      config.to_json_best_effort(indent=1).encode())
    logger = (Logger(workdir, {"sft": step0, "rl": step0 - config.sft.steps}) if main
              else NullLogger())
    total = config.sft.steps + tc.steps
    from tqdm import tqdm
    bar = tqdm(total=total, initial=step0, desc=config.variant, unit="step", dynamic_ncols=True,
               disable=not main)
    base_key = jax.random.key(config.seed + 1)
    nonfinite = int(state["nonfinite"])  # a streak a resumed run continues
    last = {}
    ts = TR.TrainState(state["params"], state["opt_state"])
    stale = list(state["stale"])
    ref = state.get("ref")
    sft_opt, rl_opt = sft_optimizer(config), rl_optimizer(tc)
    sft_aux = float(config.sft.router_aux_coef)
    sft_num = sft_numerics(config, exp)

    scope = contextlib.ExitStack()
    if placement is not None:  # jit traces under the mesh: expert parallelism, batch constraints
        scope.enter_context(jax.set_mesh(placement.mesh))
    try:
        for g_step in range(step0, total):
            if g_step < config.sft.steps:  # ---------------------------------------- SFT warm start
                toks, mask = sft_batch(exp, g_step, config.sft.batch_size)
                if placement is not None:
                    toks, mask = placement.put_batch((toks, mask), toks.shape[0])
                ts, loss, finite = TR.sft_step(ts, toks, mask, cfg=exp.cfg, numerics=sft_num,
                                               opt=sft_opt, router_aux_coef=sft_aux)
                loss = float(loss)
                nonfinite = 0 if bool(finite) else nonfinite + 1
                logger.write({"step": g_step, "sft_loss": loss}, prefix="sft")
                bar.set_postfix(sft_loss=f"{loss:.3f}")
                if g_step + 1 == config.sft.steps:  # hand over to RL with a fresh optimizer
                    ts = TR.TrainState(ts.params, opt_init(rl_opt, ts.params, placement))
                    stale = [_copy(ts.params) for _ in range(tc.max_version_diff)]
                    if tc.grpo.kl_coef:
                        ref = _copy(ts.params)
            else:  # ------------------------------------------------------------------ GRPO step
                step = g_step - config.sft.steps
                # the params this step updates (the step donates them): with
                # max_version_diff = k, the rollout of step s uses the params of step s - k
                before = _copy(ts.params) if tc.max_version_diff else None
                m = rl_iteration(exp, tc, ts, stale, ref, step, base_key, rl_opt, config, placement)
                ts, finite = m.pop("_state"), m.pop("_finite")
                stale = (stale + [before])[1:] if tc.max_version_diff else stale
                nonfinite = 0 if finite else nonfinite + 1
                logger.write(m)
                last = m
                bar.set_postfix(reward=f"{m['reward_mean']:.3f}", acc=f"{m['accuracy']:.2f}",
                                gap=f"{m['logprob_gap_max']:.3f}")
                if main:
                    bar.write(
                        f"step {step:4d} reward {m['reward_mean']:.3f} acc {m['accuracy']:.3f} "
                        f"len {m['response_len_mean']:.1f} H {m['entropy']:.3f} "
                        f"gap {m['logprob_gap_max']:.4f}/{m['logprob_gap_mean']:.5f} codes "
                        f"{m['code_agreement_hinted']:.4f}/{m['code_agreement_unhinted']:.4f} "
                        f"t {m['time_rollout_s']:.2f}+{m['time_train_s']:.2f}s")
            if nonfinite:
                log(f"WARNING: non-finite loss or gradients at step {g_step}; update skipped "
                      f"({nonfinite} in a row)")
                if nonfinite >= tc.max_nonfinite_steps:
                    raise FloatingPointError(
                        f"{nonfinite} consecutive non-finite steps (train.max_nonfinite_steps="
                        f"{tc.max_nonfinite_steps}); stopping. The last checkpoint in "
                        f"{ckpt.directory} holds the last good state.")
            bar.update(1)
            done = g_step + 1
            if done % config.checkpoint.every == 0 or done == total:
                st = {"params": ts.params, "opt_state": ts.opt_state, "step": jnp.int32(done),
                      "nonfinite": jnp.int32(nonfinite), "stale": stale}
                if tc.grpo.kl_coef:
                    st["ref"] = ref if ref is not None else ts.params
                ckpt.save(done, st)
    finally:  # also on a crash: flush metrics/TensorBoard, release the checkpointer
        scope.close()
        bar.close()
        logger.close()
        ckpt.close()
    return last


def _copy(tree):
    return jax.tree.map(jnp.copy, tree)


def rl_iteration(exp: X.Experiment, tc: TR.TrainConfig, ts: TR.TrainState, stale, ref, step: int,
                 base_key, opt, config, placement: Placement | None = None) -> dict:
    key = jax.random.fold_in(base_key, step)
    rec_codes = bool(config.rollout.record_codes) and exp.rollout_numerics.is_fp4
    roll_num = exp.rollout_numerics
    record_num = roll_num.recording_all_codes() if rec_codes else dataclasses.replace(
        roll_num, hinted=exp.train_numerics.hinted, hint_kind=roll_num.hint_kind)

    t0 = time.perf_counter()
    source = stale[0] if tc.max_version_diff else ts.params  # async: oldest allowed version
    rparams = jax.block_until_ready(R.sync_weights(
        source, roll_num, shardings=None if placement is None else placement.rollout_params,
        dtype=exp.cfg.dtype, kernel_layout=X.rollout_kernel_layout(config)))
    t1 = time.perf_counter()

    examples = exp.train_data.batch(step)
    prompts, lens = X.encode_prompts(exp, examples)
    prompts, lens = R.repeat_prompts(prompts, lens, exp.group_size)
    mesh_kw = {} if placement is None else dict(mesh=placement.mesh, rules=placement.sample_rules)
    ro = R.generate(rparams, prompts, lens, key, cfg=exp.cfg, numerics=record_num,
                    sampling=exp.sampling, capture_hints=bool(record_num.hinted), **mesh_kw)
    jax.block_until_ready(ro.tokens)
    t2 = time.perf_counter()

    reps = [e for e in examples for _ in range(exp.group_size)]
    comps = X.completions(exp, ro)
    correct = np.asarray([exp.task.is_correct(e, tasks.extract_answer(c))
                          for e, c in zip(reps, comps)], np.float32)
    finished = D.to_host(ro.finished)
    rewards, adv, in_loss = grpo.rewards_and_advantages(exp.task.rewards(reps, comps), finished,
                                                        exp.group_size, tc.grpo)
    rewards = np.asarray(rewards)
    if placement is not None:  # every process computed all rewards; keep only its shards
        adv = placement.put_batch(adv, adv.shape[0])
        in_loss = None if in_loss is None else placement.put_batch(in_loss, adv.shape[0])
    batch = TR.make_batch(ro, adv, exp.train_numerics, rec_codes, in_loss)
    if placement is not None:  # trajectories stay split by trajectory from rollout to train
        batch = placement.put_batch(batch, batch.tokens.shape[0])
    new_ts, m, finite = TR.rl_step(ts, batch, ref, cfg=exp.cfg, numerics=exp.train_numerics,
                                   tc=tc, opt=opt, max_len=exp.sampling.max_new_tokens,
                                   metric_hinted=exp.hint_sites)
    m = {k: np.asarray(v) for k, v in m.items()}
    t3 = time.perf_counter()

    nan = float("nan")
    out = {
        "step": step,
        "reward_mean": float(np.mean(rewards)),
        "accuracy": float(np.mean(correct)),
        "response_len_mean": float(np.mean(D.to_host(ro.response_lens))),
        "entropy": float(m["entropy"]),
        "logprob_gap_max": float(m["logprob_gap_max"]),
        "logprob_gap_mean": float(m["logprob_gap_mean"]),
        "kl_k3": float(m["kl_k3"]),
        "is_clip_frac": float(m["is_clip_frac"]),
        "code_agreement_hinted": float(m.get("code_agreement_hinted", nan)),
        "code_agreement_unhinted": float(m.get("code_agreement_unhinted", nan)),
        "routing_agreement": float(m["routing_agreement"]),
        "hint_bytes_per_token": R.expected_hint_bytes_per_token(exp.cfg, dataclasses.replace(
            roll_num, hinted=exp.train_numerics.hinted)) if exp.variant.hints else 0.0,
        "time_rollout_s": t2 - t1,
        "time_train_s": t3 - t2,
        "time_sync_s": t1 - t0,
        "loss": float(m["loss"]),
        "grad_norm": float(m["grad_norm"]),
        "prob_gap_max": float(m["prob_gap_max"]),
        "mismatch_one_step_frac": float(m.get("mismatch_one_step_frac", nan)),
        "finished_frac": float(np.mean(finished)),
    }
    out["_state"], out["_finite"] = new_ts, bool(finite)
    return out
