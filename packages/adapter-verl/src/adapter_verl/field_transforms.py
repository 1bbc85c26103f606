"""The named functions verl's field table (`adapter_verl.field_table`) calls: transforms (one verl
value -> a core value), computes (several verl fields -> a core value), the checks of its
cross-field rules and its startup notices. A transform raises `FieldProblem` for a value the Arctic
path cannot map and returns `UNSET` to leave the core default.
"""

from __future__ import annotations

import os
from typing import Any

from arctic_rl_core.backends.cortex_limits import CORTEX_LIMITS
from arctic_rl_core.config.framework_fields import UNSET, FieldProblem, Fields, Found, Reader
from arctic_rl_core.config.loss_selection import server_loss_for

from adapter_verl.modes import ASYNC_TRAINER_MODE, TRAINER_MODE, VERL_SEPARATE_ASYNC

A = "actor_rollout_ref.actor"
M = "actor_rollout_ref.model"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
RC = "algorithm.rollout_correction"
CORE_PREFIX = "remote_backend.core"
TRAINER_MODE_FIELD = "trainer.v1.trainer_mode"
OFF_POLICY_THRESHOLD = "trainer.v1.sampler.max_off_policy_threshold"
OFF_POLICY_STRATEGY = "trainer.v1.sampler.max_off_policy_strategy"
SEPARATE_ASYNC = "trainer.v1.separate_async"
SYNC_STEP_FIELD = f"{SEPARATE_ASYNC}.parameter_sync_step"
LOSS_MODE = f"{A}.policy_loss.loss_mode"
# verl policy_loss.loss_mode -> the core loss family the Arctic server computes (arctic_rl_losses);
# verl's `vanilla` always dual-clips for negative advantages.
VERL_POLICY_LOSSES: dict[str, str] = {
    "vanilla": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
    "gpg": "gpg",
}

# -- values ----------------------------------------------------------------------------------------


def unset_if_none(value: Any) -> Any:
    return UNSET if value is None else value


def int_or_unset(value: Any) -> Any:
    return UNSET if value is None else int(value)


def true_or_unset(value: Any) -> Any:
    """verl's false is its default: it leaves the core's (backend) default."""
    return True if value else UNSET


def floats(value: Any) -> list[float]:
    return [float(item) for item in value]


def is_off(value: Any) -> bool:
    return not value


def bf16_of_dtype(value: Any) -> bool:
    if str(value) in ("bfloat16", "bf16"):
        return True
    if str(value) in ("float32", "fp32"):
        return False
    raise FieldProblem("the Arctic training job trains in bfloat16 or float32", "set bfloat16 or float32")


def absolute_path(value: Any) -> str:
    return os.path.abspath(str(value))


def keep_count(value: Any) -> Any:
    # verl's checkpoint managers prune only for a positive count
    return int(value) if value is not None and int(value) > 0 else UNSET


def grad_clip(value: Any) -> Any:
    return None if value is None else float(value)


# -- placement -------------------------------------------------------------------------------------


def training_gpus(read: Reader) -> int:
    return int(read("trainer.nnodes")) * int(read("trainer.n_gpus_per_node"))


def sampling_gpus(read: Reader) -> int:
    if read("actor_rollout_ref.hybrid_engine") in (None, True):
        return training_gpus(read)
    return int(read(f"{R}.nnodes") or 0) * int(read(f"{R}.n_gpus_per_node") or 0)


def log_prob_gpus(read: Reader) -> Any:
    """verl's reference policy shares the actor's GPUs: the log-prob job gets as many, when a KL
    loss or KL in the reward needs reference log-probs (`remote_backend.core.placement.log_prob_gpus` overrides)."""
    wants = read(f"{A}.use_kl_loss") or read("algorithm.use_kl_in_reward")
    if read(f"{CORE_PREFIX}.placement.log_prob_gpus") is not None or not wants:
        return UNSET
    return training_gpus(read)


def ulysses_size(read: Reader) -> int:
    """verl's Ulysses degree (the actor's, or its engine's: they must agree when both are set)."""
    actor = int(read(f"{A}.ulysses_sequence_parallel_size") or 1)
    engine = int(read(f"{A}.fsdp_config.ulysses_sequence_parallel_size") or 1)
    if actor != 1 and engine != 1 and actor != engine:
        raise FieldProblem(
            f"differs from {A}.ulysses_sequence_parallel_size={actor}",
            "set one of the two",
            field=f"{A}.fsdp_config.ulysses_sequence_parallel_size",
            value=engine,
        )
    return actor if actor != 1 else engine


# -- batch -----------------------------------------------------------------------------------------


def dynamic_batches(read: Reader) -> bool:
    """verl's `use_dynamic_bsz`: micro-batches sized by the token budget, not by a count of rows."""
    return bool(read(f"{A}.use_dynamic_bsz") or False)


def micro_batch_size(read: Reader) -> Any:
    """The rows of a micro-batch: verl's `ppo_micro_batch_size_per_gpu`, unless verl sizes micro-batches
    by tokens (`use_dynamic_bsz`): then the core derives them from the token budget (engine_fit)."""
    if dynamic_batches(read):
        return UNSET
    return int_or_unset(read(f"{A}.ppo_micro_batch_size_per_gpu"))


def token_budget(read: Reader) -> Any:
    """verl's per-GPU token budget. With Ulysses SP verl's budget is per SP rank and one sequence spans
    the SP group; the Arctic training job runs no SP (arctic-platform 0.1.4 splits no batch for it), so a
    GPU holds what verl's SP group held: the budget x the SP degree."""
    budget = read(f"{A}.ppo_max_token_len_per_gpu")
    return UNSET if budget is None else int(budget) * ulysses_size(read)


# -- engines ---------------------------------------------------------------------------------------


def offload_param(read: Reader) -> bool:
    """FSDP parameter offload, or FSDP2's CPUOffloadPolicy (offload_policy: parameters, gradients and
    optimizer state on the CPU): DeepSpeed's parameter offload (ZeRO-3, fitted by engine_fit)."""
    return bool(read(f"{A}.fsdp_config.param_offload")) or bool(read(f"{A}.fsdp_config.offload_policy"))


def offload_optimizer(read: Reader) -> bool:
    return bool(read(f"{A}.fsdp_config.optimizer_offload")) or bool(read(f"{A}.fsdp_config.offload_policy"))


def use_liger(read: Reader) -> Any:
    """verl's Liger switch, or its fused kernels (fused linear + log-prob/entropy): the Arctic training
    job's fused kernels are Liger's. verl's defaults (false) leave the backend's default."""
    return True if read(f"{M}.use_liger") or read(f"{M}.use_fused_kernels") else UNSET


def engine_args(read: Reader) -> Any:
    """engine_kwargs.vllm (less max_model_len, a typed knob: see max_model_len), quantization, vLLM's
    expert parallelism for rollout.expert_parallel_size > 1 (experts sharded over each engine's TP GPUs)
    and rollout.cudagraph_capture_sizes (vLLM's compilation_config)."""
    args = dict(read(f"{R}.engine_kwargs.vllm") or {})
    args.pop("max_model_len", None)
    if read(f"{R}.quantization"):
        args["quantization"] = read(f"{R}.quantization")
    if int(read(f"{R}.expert_parallel_size") or 1) > 1:
        args.setdefault("enable_expert_parallel", True)
    sizes = read(f"{R}.cudagraph_capture_sizes")
    if sizes:
        args["compilation_config"] = {
            **(args.get("compilation_config") or {}),
            "cudagraph_capture_sizes": sizes,
        }
    return args or UNSET


def max_model_len(read: Reader) -> Any:
    """rollout.max_model_len, else engine_kwargs.vllm.max_model_len (the same vLLM knob)."""
    value = read(f"{R}.max_model_len")
    if value is None:
        value = (read(f"{R}.engine_kwargs.vllm") or {}).get("max_model_len")
    return int_or_unset(value)


def export_hf(read: Reader) -> Any:
    """verl's checkpoint.save_contents with 'hf_model': each Arctic checkpoint gets its hf/ copy."""
    contents = read(f"{A}.checkpoint.save_contents") or []
    return True if "hf_model" in contents else UNSET


# -- optimizer -------------------------------------------------------------------------------------


def _schedule(value: Any) -> Any:
    if value is None:
        return UNSET
    if str(value) not in ("constant", "cosine"):
        raise FieldProblem(
            f"the Arctic engine schedules constant or cosine only, not {value!r}", "set constant or cosine"
        )
    return str(value)


def scheduler(read: Reader) -> Any:
    return _schedule(read(f"{A}.optim.lr_scheduler_type") or read(f"{A}.optim.warmup_style") or "constant")


def warmup_steps(read: Reader) -> Any:
    """verl's lr_warmup_steps, which wins over the ratio: > 0 is a warmup of that many optimizer steps;
    0 is no warmup; negative leaves it to lr_warmup_steps_ratio."""
    steps = read(f"{A}.optim.lr_warmup_steps")
    return int(steps) if steps is not None and int(steps) > 0 else UNSET


def warmup_ratio(read: Reader) -> Any:
    steps = read(f"{A}.optim.lr_warmup_steps")
    if steps is not None and int(steps) >= 0:
        return UNSET
    ratio = read(f"{A}.optim.lr_warmup_steps_ratio")
    return float(ratio) if ratio else UNSET


def min_lr_ratio(read: Reader) -> Any:
    return float(read(f"{A}.optim.min_lr_ratio") or 0.0) if scheduler(read) == "cosine" else UNSET


# -- loss ------------------------------------------------------------------------------------------


# losses verl computes and the Arctic server does not: what is nearest, and how to get there
NEAREST_LOSS: dict[str, str] = {
    "geo_mean": (
        f"set {LOSS_MODE}=gspo, the nearest the server computes (the ratio is a geometric mean of the token "
        "ratios, clipped per sequence where GMPO clips each token in log space; GSPO's clip range is about 1e-3: "
        f"{A}.clip_ratio_low=0.0003 {A}.clip_ratio_high=0.0004, as verl's gspo example), or vanilla"
    ),
}


def loss_family(read: Reader) -> str:
    mode = read(LOSS_MODE) or "vanilla"
    if mode not in VERL_POLICY_LOSSES:
        raise FieldProblem(
            f"the Arctic server computes {', '.join(sorted(VERL_POLICY_LOSSES))} (arctic_rl_losses), not "
            f"{mode!r}",
            NEAREST_LOSS.get(mode, f"set {LOSS_MODE} to one of them"),
        )
    return VERL_POLICY_LOSSES[mode]


def loss_fn(read: Reader) -> str:
    backend = read(f"{CORE_PREFIX}.backend") or {}
    return server_loss_for(loss_family(read), backend, loss_agg_mode=str(read(f"{A}.loss_agg_mode")))


def only_with_loss(family: str, field: str, default: float) -> Any:
    """A family's knob from its verl field, only when that family runs (else the core leaves it unset)."""

    def knob_of_family(read: Reader) -> Any:
        if loss_family(read) != family:
            return UNSET
        value = read(field)
        return float(default if value is None else value)

    return knob_of_family


def pg_loss_agg_mode(read: Reader) -> Any:
    # verl's sapo aggregates its policy term per sequence whatever loss_agg_mode says
    return "seq-mean-token-mean" if loss_family(read) == "sapo" else UNSET


# -- asynchronous training -------------------------------------------------------------------------


def separate_async_mode(read: Reader) -> bool:
    """Whether the run is the adapter's separate-async mode; a trainer mode the Arctic path does not
    run is a problem."""
    mode = read(TRAINER_MODE_FIELD)
    if mode in (None, TRAINER_MODE):
        return False
    if mode == ASYNC_TRAINER_MODE:
        return True
    if mode == VERL_SEPARATE_ASYNC:
        raise FieldProblem(
            "verl's own separate_async trainer runs verl's GPU workers, not the Arctic forwarders",
            "run through python -m adapter_verl.main (or arctic-rl demo), which selects "
            f"trainer.v1.trainer_mode={ASYNC_TRAINER_MODE} for it",
            field=TRAINER_MODE_FIELD,
        )
    raise FieldProblem(
        "the Arctic path runs verl's synchronous trainer (arctic) or its separate-async trainer; "
        "colocate_async trains and samples on the same GPUs in turns, so nothing overlaps",
        "set trainer.v1.trainer_mode=arctic (synchronous, the default) or separate_async (asynchronous, "
        "with actor_rollout_ref.hybrid_engine=false)",
        field=TRAINER_MODE_FIELD,
    )


def parameter_sync_step(read: Reader) -> int:
    value = read(SYNC_STEP_FIELD)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FieldProblem(
            "must be an integer >= 1 (verl's updates per weight sync)",
            "set an integer >= 1",
            field=SYNC_STEP_FIELD,
        )
    return value


def max_staleness(read: Reader) -> Any:
    """verl bounds the steps a trajectory may span from its prompt's submission (step p) to its training
    (step g): g - p + 1 <= threshold. Each verl step is parameter_sync_step = N updates of one mini-batch
    each (ppo_epochs = E optimizer steps apiece) and one weight sync at its end. Submitted at step p, a
    trajectory is sampled with the weights synced at the end of step p - 1 or newer; trained at step g by
    the update j (0 .. N - 1), the trainer is (g - p) x N x E + j x E optimizer steps past them: at most
    (threshold x N - 1) x E, the core's unit (N = 1: (threshold - 1) x E)."""
    if not separate_async_mode(read):
        return UNSET
    threshold = read(OFF_POLICY_THRESHOLD)
    if threshold is None:
        raise FieldProblem(
            "null turns verl's off-policy version control off (unbounded staleness); the Arctic path "
            "bounds it (async.max_staleness)",
            "set an integer >= 1: the steps a trajectory may span (1 = no step stale)",
            field=OFF_POLICY_THRESHOLD,
        )
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise FieldProblem("must be an integer >= 1", "set an integer >= 1", field=OFF_POLICY_THRESHOLD)
    return (threshold * parameter_sync_step(read) - 1) * int(read(f"{A}.ppo_epochs") or 1)


def _async_active(read: Reader) -> bool:
    staleness = max_staleness(read)
    return staleness is not UNSET and staleness > 0


def stale_policy(read: Reader) -> Any:
    """drop: verl's replay buffer drops the stale group (= the core's drop); wait: it holds the step
    until the in-flight stale groups finish, so none ever exceeds the bound (the core's gate only checks)."""
    if not _async_active(read):
        return UNSET
    return "drop" if read(OFF_POLICY_STRATEGY) == "drop" else UNSET


def is_weight_cap(read: Reader) -> Any:
    """verl's token-level TIS (rollout_is=token) is the core's truncated IS with rollout_is_threshold as
    the cap; verl computes the weights itself then."""
    if not _async_active(read) or read(f"{RC}.rollout_is") != "token":
        return UNSET
    threshold = read(f"{RC}.rollout_is_threshold")
    try:
        return float(threshold)
    except (TypeError, ValueError):
        return UNSET


# -- rule checks -----------------------------------------------------------------------------------


def is_separate_async(read: Reader) -> bool:
    """The adapter's asynchronous mode: verl's separate-async trainer (`arctic_separate_async`)."""
    return read(TRAINER_MODE_FIELD) == ASYNC_TRAINER_MODE


def is_bypass_mode(read: Reader) -> bool:
    """verl's bypass mode (`algorithm.rollout_correction.bypass_mode=true`): verl's V1 trainer sets the old
    log-probs to the rollout's instead of calling the forwarder's compute_log_prob."""
    return bool(read(f"{RC}.bypass_mode") or False)


def _hybrid_engine(f: Fields) -> bool:
    value = f("actor_rollout_ref.hybrid_engine")
    return True if value is None else bool(value)


def _backend_kind(f: Fields) -> Any:
    backend = f(f"{CORE_PREFIX}.backend")
    return (backend or {}).get("kind")


def gae_needs_a_critic(f: Fields) -> bool:
    return f("algorithm.adv_estimator") == "gae"


def no_micro_batch(f: Fields) -> Found | None:
    if dynamic_batches(f) or f(f"{A}.ppo_micro_batch_size_per_gpu") is not None:
        return None
    return Found(value=None)


def gen_batch_without_group_filter(f: Fields) -> Found | None:
    """data.gen_batch_size matters to verl's V1 trainer only without DAPO's group filter (with it verl
    fetches one prompt at a time whatever it says): more prompts generated than a step trains leave
    groups in verl's replay buffer for a later step, sampled with older weights, which the synchronous
    Arctic mode (staleness 0) does not train."""
    value = f("data.gen_batch_size")
    if value in (None, 1, f("data.train_batch_size")) or (f("algorithm.filter_groups") or {}).get("enable"):
        return None
    return Found(value=value)


def bird_agent_without_turn_limit(f: Fields) -> bool:
    """verl's default agent loop is the adapter's BIRD loop (adapter_verl.bird_agent_loop.AGENT_NAME) and
    no turn limit is set (rows naming it by agent_name are checked by the loop itself)."""
    return f(f"{R}.agent.default_agent_loop") == "bird_sql_agent" and not f(
        f"{R}.multi_turn.max_assistant_turns"
    )


def standalone_rollout_without_gpus(f: Fields) -> bool:
    return not _hybrid_engine(f) and int(f(f"{R}.nnodes") or 0) <= 0


def remote_code_off_reference(f: Fields) -> Found | None:
    if f(f"{M}.trust_remote_code") and _backend_kind(f) != "reference":
        return Found(value=True)
    return None


def async_on_the_hybrid_engine(f: Fields) -> Found | None:
    return Found(value=True) if is_separate_async(f) and _hybrid_engine(f) else None


def async_updates_without_bypass(f: Fields) -> bool:
    sync_step = f(SYNC_STEP_FIELD)
    return is_separate_async(f) and isinstance(sync_step, int) and sync_step > 1 and not is_bypass_mode(f)


def async_batch_not_sync_steps(f: Fields) -> Found | None:
    sync_step, mini_batch = f(SYNC_STEP_FIELD), f(f"{A}.ppo_mini_batch_size")
    if not (is_separate_async(f) and isinstance(sync_step, int) and sync_step >= 1):
        return None
    if f("data.train_batch_size") == sync_step * (mini_batch or 0):
        return None
    return Found(
        names={"sync_step": sync_step, "mini_batch": mini_batch, "want": sync_step * (mini_batch or 0)}
    )


def async_naive_checkpoint_engine(f: Fields) -> bool:
    return is_separate_async(f) and f(f"{R}.checkpoint_engine.backend") == "naive"


def rollout_logprobs_missing(f: Fields) -> Found | None:
    """Bypass mode (any trainer mode) and separate_async read the rollout log-probs."""
    if not (is_separate_async(f) or is_bypass_mode(f)) or f(f"{R}.calculate_log_probs"):
        return None
    why = (
        f"{RC}.bypass_mode=true takes the old log-probs from the rollout"
        if is_bypass_mode(f)
        else "asynchronous training corrects for stale rollouts with truncated IS weights from the rollout log-probs"
    )
    return Found(value=False, names={"why": why})


def bypass_with_rollout_is(f: Fields) -> bool:
    return is_bypass_mode(f) and f(f"{RC}.rollout_is") is not None


def bypass_with_rollout_rs(f: Fields) -> bool:
    return is_bypass_mode(f) and f(f"{RC}.rollout_rs") is not None


def bypass_with_is_weight_cap(f: Fields) -> Found | None:
    core_async = (f(CORE_PREFIX) or {}).get("async")
    if not (is_bypass_mode(f) and isinstance(core_async, dict) and "is_weight_cap" in core_async):
        return None
    return Found(field=f"{CORE_PREFIX}.async.is_weight_cap", value=core_async["is_weight_cap"])


def cortex_resumes_from_path(f: Fields) -> bool:
    return _backend_kind(f) == "cortex" and f("trainer.resume_mode") == "resume_path"


CORTEX_RESUME = CORTEX_LIMITS["load-checkpoint"]

# -- notices ---------------------------------------------------------------------------------------

# verl's estimators whose baseline is the prompt's group (a group of one has none)
GROUP_ESTIMATORS = ("grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "gdpo", "opo")


def group_of_one(f: Fields) -> str | None:
    estimator, n = f("algorithm.adv_estimator"), f(f"{R}.n")
    if estimator not in GROUP_ESTIMATORS or n != 1:
        return None
    return (
        f"{R}.n=1 with algorithm.adv_estimator={estimator}: each prompt's group is one response, so its baseline "
        f"is that response and every advantage is zero (nothing is learned); set {R}.n >= 2"
    )


def kl_in_reward_and_loss(f: Fields) -> str | None:
    if not (f("algorithm.use_kl_in_reward") and f(f"{A}.use_kl_loss")):
        return None
    return (
        f"algorithm.use_kl_in_reward=true with {A}.use_kl_loss=true: the KL to the reference policy is applied "
        "twice, as verl does: subtracted from the rewards by verl (algorithm.kl_ctrl) and added to the loss by the "
        "Arctic server (kl_loss_coef); both read the log-prob job's reference log-probs"
    )


def sequence_parallel_off(f: Fields) -> str | None:
    sp = ulysses_size(f)
    if sp <= 1:
        return None
    budget = f(f"{A}.ppo_max_token_len_per_gpu")
    return (
        f"{A}.ulysses_sequence_parallel_size={sp}: the Arctic training job runs no Ulysses sequence parallelism "
        "(arctic-platform 0.1.4 splits no batch for it): training is data-parallel over every GPU, each holding "
        f"whole sequences, with the token budget {A}.ppo_max_token_len_per_gpu x {sp} = {int(budget) * sp} "
        "(a GPU holds what the SP group held: more memory per GPU)"
    )


def activation_offload_as_recompute(f: Fields) -> str | None:
    if not f(f"{M}.enable_activation_offload"):
        return None
    return (
        f"{M}.enable_activation_offload=true: the Arctic training job recomputes activations (gradient "
        f"checkpointing, {M}.enable_gradient_checkpointing) instead of offloading them to the CPU"
    )


def async_waits_for_stale_groups(f: Fields) -> str | None:
    """What verl's separate-async settings mean on the Arctic path beyond the core's `async` group."""
    if not is_separate_async(f) or f(OFF_POLICY_STRATEGY) != "wait":
        return None
    return (
        "trainer.v1.sampler.max_off_policy_strategy=wait: verl's replay buffer holds each step until the prompts "
        "in flight that reached max_off_policy_threshold finish, so no trained rollout exceeds the bound and "
        "async.stale_policy is never applied (the core's StalenessGate still checks every trained row)"
    )
