"""Fields shared by every config; each config file overrides what it needs."""

import ml_collections


def base_config():
    c = ml_collections.ConfigDict()
    c.seed = 0  # PRNG seed for everything
    c.workdir = ""  # output directory (metrics, checkpoints); "" = runs/default
    # warm start: a finished run's directory whose newest checkpoint's params (not its optimizer)
    # start this run instead of a random init; "" = random init (then config.sft)
    c.init_from = ""

    # The policy network (trace_jax.model.ModelConfig fields).
    c.model = ml_collections.ConfigDict(dict(
        vocab_size=60, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=32,
        n_experts=8, top_k=2, d_expert=64,
        d_shared=0,  # shared-expert width (0 = none)
        norm_topk_prob=True,  # renormalise the top-k routing weights
        rope_theta=10_000.0, norm_eps=1e-6,
        tie_embeddings=False,
        max_seq_len=64,
        scan_layers=False,  # training forwards as a lax.scan over layer groups (compile time)
        param_dtype="float32",  # trainer master weights
        dtype="bfloat16",  # activations
        init_std=0.02,
    ))

    # FP4 numerics (trace_jax.numerics): which sites are quantized and which carry hints.
    c.numerics = ml_collections.ConfigDict(dict(
        fmt="nvfp4",  # "nvfp4" (16-blocks, E4M3 scales) or "mxfp4" (32-blocks, E8M0 scales)
        # site kinds (all layers) or regexes over names like "layers/3/moe/expert_in"
        sites=("moe/expert_in", "moe/expert_hidden", "moe/expert_weights", "attn/kv"),
        hint_sites=("moe/expert_in", "moe/expert_hidden", "attn/kv"),
        # "last_half" | "all" | "none" | a fraction of the last layers ("0.25") | layers ("[2, 3]"),
        # always as a string (the field is typed str, so the command line's form is the one)
        hint_layers="last_half",
        hint_kind="mantissa",  # "mantissa" (TRACE's 1-bit hint) | "exact" (full codes)
    ))

    # Which runs: the experiment variant (trace_jax.experiment.VARIANTS).
    c.variant = "trace"  # bf16 | fp4_naive | fp4_qat_rtn | fp4_qat_w4a16 | trace

    # kind "char" (one token per character) or "hf" (path: a tokenizer.json; pad / bos / eos
    # token spellings, "" = the first of the common ones the vocabulary has)
    c.tokenizer = ml_collections.ConfigDict(dict(kind="char", path="", pad_token="", bos_token="",
                                                 eos_token=""))
    # Task: trace_jax.tasks.get_task(name, **kwargs); eval_fraction: the share of the task's
    # problems held out for evaluation (never trained on, SFT included); split_by: what the split
    # hashes, "problem" (Task.split_key: 12+34= and 34+12= together) or "prompt" (the text; runs
    # from before session 41, whose config.json has no split_by)
    c.task = ml_collections.ConfigDict(dict(name="addition", kwargs=ml_collections.ConfigDict(
        dict(digits=2)), eval_fraction=0.05, split_by="problem"))  # (tasks.EVAL_FRACTION)

    # Rollout (trace_jax.rollout): prompts per step, samples per prompt, sampler.
    c.rollout = ml_collections.ConfigDict(dict(
        batch_prompts=8,  # prompts per RL step
        group_size=4,  # G samples per prompt (GRPO group)
        max_new_tokens=8,
        temperature=1.0, top_k=0, top_p=1.0,
        record_codes=True,  # also record exact codes at every site (code-agreement metrics)
        # rollout params per layer (no per-step copy of a layer's weights before a Pallas call)
        # and FP4 experts packed (once per sync) for the Pallas FP4 grouped matmul (GPU; its
        # pure-JAX reference elsewhere) instead of dequantize + grouped matmul: use on GPUs
        kernel_layout=False,
        # which FP4 grouped kernel kernel_layout packs for: "auto" (the Mosaic GPU kernel for
        # NVFP4 experts with K, N multiples of 64, else the Triton one), "triton", "mosaic"
        expert_kernel="auto",
        # P in the rollout's decode attention P.V (the rollout Numerics' attention_p): "f32"
        # (the GPU kernel splits it into two bf16 terms, 8e-7 relative error at 128K) or
        # "bf16" (rounded once, 5e-4; the attention call 13-15% faster at 32K+ on an H200 for
        # NVFP4 caches, 10% for MXFP4, sessions 29-30; the CPU reference rounds P to bf16 too).
        # The trainer's attention rounds P the same way (on the CPU rollout and trainer then
        # agree under either, up to rare f32 summation-order differences; on a GPU the kernel
        # rounds P per block, which the trainer cannot replay bit for bit).
        attention_p_precision="f32",
    ))

    # Supervised warm start on the task's worked solutions, before RL.
    c.sft = ml_collections.ConfigDict(dict(
        steps=0, batch_size=32, lr=3e-3, warmup_steps=10,
        router_aux_coef=1e-3,  # the routers' load-balancing loss weight during SFT
        # "bf16": SFT in BF16 whatever the variant (a stand-in for a BF16-pretrained policy);
        # "trainer": with the variant's trainer numerics (W4A4 fake quantization for RTN / TRACE)
        numerics="bf16",
    ))

    # GRPO trainer (trace_jax.train.TrainConfig + trace_jax.grpo.GRPOConfig fields).
    c.train = ml_collections.ConfigDict(dict(
        steps=20,  # RL steps
        lr=1e-4, warmup_steps=2, weight_decay=0.0, grad_clip=1.0,
        micro_batches=1,  # gradient accumulation
        routing_replay=True,  # R3
        router_aux_coef=1e-3, router_z_coef=1e-4,
        max_version_diff=0,  # asynchronous rollouts: step s samples with the params of step s - k
        max_nonfinite_steps=3,
        clip_eps_low=0.2, clip_eps_high=0.28,
        is_mode="token_tis",  # token_tis | seq_mask | none
        is_cap=5.0,
        adv_std_norm=True,  # False = Dr.GRPO
        loss_agg="token_mean",  # token_mean | seq_mean | dr_grpo
        kl_coef=0.0,
        truncated="score",  # responses without EOS: score | fail (reward 0) | mask (no gradient)
    ))
    c.checkpoint = ml_collections.ConfigDict(dict(every=10, keep=3))

    # Device mesh (trace_jax.sharding): axis names and sizes, -1 = the rest (axes left out
    # have size 1: axes=("data", "fsdp"), shape=(1, -1) is FSDP alone); rule overrides.
    # Default: one device. All devices, data-parallel rollout + FSDP training:
    # --config.mesh.shape="(1,-1,1,1)"; trajectories split over data x fsdp.
    c.mesh = ml_collections.ConfigDict(dict(
        axes=("data", "fsdp", "expert", "tensor"), shape=(1, 1, 1, 1), rules={}))

    # Several processes / hosts (trace_jax.distributed): jax.distributed.initialize from here or
    # from the environment ("auto": only when it names a coordinator, SLURM or Open MPI ranks).
    c.distributed = ml_collections.ConfigDict(dict(
        enabled="auto", coordinator_address="", num_processes=0, process_id=-1,
        local_device_ids=""))
    # Locked: a config file that sets a field this schema lacks (a typo: rollout.max_new_token)
    # fails when it loads, naming the field, as a --config.* override does; task.kwargs (the
    # task's own options) and mesh.rules stay open.
    c.lock()
    c.task.kwargs.unlock()
    c.mesh.rules.unlock()
    return c
