"""The named functions SkyRL's field table (`adapter_skyrl.field_table`) calls: transforms (one
SkyRL value -> a core value), computes (several SkyRL fields -> a core value), the checks of its
cross-field rules and its startup notices. A transform raises `FieldProblem` for a value the Arctic
path cannot map and returns `UNSET` to leave the core default.

Besides SkyRL's fields, a reader may be asked for pseudo fields the adapter resolves: `ARCTIC_ZORRO`
(whether ZoRRo is on for this run, which decides what SkyRL's micro-batch means), `ARCTIC_BACKEND`
(the run's core `backend` group) and `STEPS_PER_EPOCH` (from the data files; None when unreadable).
"""

from __future__ import annotations

from typing import Any

from arctic_rl_core.backends.cortex_limits import CORTEX_LIMITS
from arctic_rl_core.config.framework_fields import UNSET, FieldProblem, Fields, Found, Reader
from arctic_rl_core.config.loss_selection import server_loss_for
from arctic_rl_core.config.schema import ONPREM_BACKENDS

from adapter_skyrl.loss_reductions import LOSS_REDUCTIONS, SERVER_AGGREGATED, SKYRL_PRESCALED
from adapter_skyrl.registries import (
    CRITIC_ESTIMATORS,
    registered_environments,
    registered_estimators,
    registered_policy_losses,
)
from adapter_skyrl.samples import rollout_anchored

ARCTIC_ZORRO = "@arctic.zorro"  # pseudo field: ZoRRo on for this run (resolved by the adapter)
ARCTIC_BACKEND = "@arctic.backend"  # pseudo field: the run's core `backend` group (kind defaulted)
STEPS_PER_EPOCH = "@data.steps_per_epoch"  # pseudo field: training rows // train_batch_size

SCHEDULERS = {"constant_with_warmup": "constant", "cosine": "cosine"}
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
# SkyRL policy_loss_type -> a core loss family the server computes (arctic_rl_losses); SkyRL's
# `regular` is PPO clip WITHOUT dual clip, `dual_clip` adds it.
SKYRL_POLICY_LOSSES = {
    "regular": "ppo_clip",
    "dual_clip": "dual_clip",
    "gspo": "gspo",
    "sapo": "sapo",
    "cispo": "cispo",
    "clip_cov": "clip_cov",
    "kl_cov": "kl_cov",
    # the behaviour policy is the rollout: the adapter sends the rollout log-probs as old log-probs
    "rollout_is": "rollout_is",
}
DYNAMIC_SAMPLING_TYPES = ("filter", "replace")
ALGO = "trainer.algorithm"
FULLY_ASYNC = "trainer.fully_async"
DS = f"{ALGO}.dynamic_sampling"

# -- placement -------------------------------------------------------------------------------------


def training_gpus(r: Reader) -> int:
    return int(r("trainer.placement.policy_num_gpus_per_node")) * int(r("trainer.placement.policy_num_nodes"))


def sampling_gpus(r: Reader) -> int:
    return int(r("generator.inference_engine.num_engines")) * int(
        r("generator.inference_engine.tensor_parallel_size")
    )


def log_prob_gpus(r: Reader) -> int:
    if not (r(f"{ALGO}.use_kl_loss") or r(f"{ALGO}.use_kl_in_reward")):
        return 0
    return int(r("trainer.placement.ref_num_gpus_per_node")) * int(r("trainer.placement.ref_num_nodes"))


def is_one(value: Any) -> bool:
    return value == 1


def is_fsdp(value: Any) -> bool:
    return value in ("fsdp", "fsdp2")


# -- model, kernels, checkpoints -------------------------------------------------------------------


def attn_implementation(r: Reader) -> Any:
    return UNSET if r("trainer.flash_attn") else "sdpa"


def model_name(value: Any) -> Any:
    return value


def keep_count(value: Any) -> Any:
    if int(value) < 0:
        return UNSET  # SkyRL's -1: keep every checkpoint
    if int(value) == 0:
        raise FieldProblem(
            "SkyRL's cleanup would delete every checkpoint, the one just saved included",
            "set trainer.max_ckpts_to_keep=-1 (keep all) or a count >= 1",
        )
    return int(value)


# -- inference engines -----------------------------------------------------------------------------

ENGINE = "generator.inference_engine"
PD_ONLY_ENGINE_KWARGS = ("kv_transfer_config",)  # what a prefill/decode split passes to its engines


def engine_args(r: Reader) -> dict[str, Any]:
    """The Arctic sampler's extra vLLM engine arguments from SkyRL's: engine_init_kwargs (its
    max_model_len is the core's typed vllm.max_model_len; with enable_pd the KV transfer between
    prefill and decode engines does not apply), and what SkyRL itself adds from its fields."""
    kwargs = dict(r(f"{ENGINE}.engine_init_kwargs") or {})
    kwargs.pop("max_model_len", None)
    if r(f"{ENGINE}.enable_pd"):
        for key in PD_ONLY_ENGINE_KWARGS:
            kwargs.pop(key, None)
    if r(f"{ENGINE}.language_model_only"):
        kwargs.setdefault("language_model_only", True)
    if int(r(f"{ENGINE}.expert_parallel_size")) > 1:
        kwargs.setdefault("enable_expert_parallel", True)
    return kwargs


def engine_max_model_len(r: Reader) -> Any:
    value = dict(r(f"{ENGINE}.engine_init_kwargs") or {}).get("max_model_len")
    return UNSET if value is None else int(value)


# -- batch -----------------------------------------------------------------------------------------


def micro_batch(r: Reader) -> Any:
    value = int(r("trainer.micro_train_batch_size_per_gpu"))
    if r(ARCTIC_ZORRO):
        return UNSET  # ZoRRo sizes micro-batches to whole prompt groups (the legacy integration's rule)
    return value


def token_budget(value: Any) -> Any:
    return UNSET if int(value) <= 0 else int(value)


# -- optimizer -------------------------------------------------------------------------------------


def scheduler(value: Any) -> str:
    if value not in SCHEDULERS:
        raise FieldProblem(
            "the core schedule is a linear warmup then constant or cosine",
            f"use one of {list(SCHEDULERS)}",
        )
    return SCHEDULERS[value]


def total_training_steps(r: Reader) -> int | None:
    """Global training steps of the run, as SkyRL's trainer counts them (None without the data)."""
    per_epoch = r(STEPS_PER_EPOCH)
    if per_epoch is None:
        return None
    steps = int(per_epoch) * int(r("trainer.epochs"))
    limit = r("trainer.max_training_steps")
    return min(steps, int(limit)) if limit is not None else steps


def total_steps(r: Reader) -> Any:
    steps = total_training_steps(r)
    if steps is None:
        limit = r("trainer.max_training_steps")
        return int(limit) if limit is not None else UNSET
    return steps


def warmup_steps(value: Any) -> Any:
    """SkyRL's num_warmup_steps counts optimizer steps: the core's warmup in steps (no horizon needed)."""
    return int(value) if int(value) > 0 else UNSET


# -- loss ------------------------------------------------------------------------------------------


def loss_family(value: Any) -> str:
    if value in SKYRL_POLICY_LOSSES:
        return SKYRL_POLICY_LOSSES[value]
    if value not in registered_policy_losses():
        raise FieldProblem(
            "not a policy loss in SkyRL's PolicyLossRegistry in this process, and one registered there (SkyRL's "
            "custom_policy_loss example registers its own) would run in SkyRL's training workers, which the Arctic "
            f"path does not start: the Arctic server computes the loss ({list(SKYRL_POLICY_LOSSES)})",
            f"use one of {list(SKYRL_POLICY_LOSSES)}",
        )
    if value in ("dppo", "cross_entropy", "importance_sampling"):
        raise FieldProblem(
            "the Arctic server computes the loss: the GRPO-family losses and rollout_is (arctic_rl_losses); "
            f"SkyRL's {value} has no server loss (dppo's divergence mask; cross_entropy and importance_sampling "
            "are SFT / distillation losses)",
            f"use one of {list(SKYRL_POLICY_LOSSES)}",
        )
    raise FieldProblem(
        "a policy loss registered in SkyRL's PolicyLossRegistry runs in SkyRL's training workers, which the Arctic "
        "path does not start: the Arctic server computes the loss (the GRPO-family losses and rollout_is)",
        f"use one of {list(SKYRL_POLICY_LOSSES)}",
    )


def loss_fn(r: Reader) -> Any:
    family = SKYRL_POLICY_LOSSES.get(r(f"{ALGO}.policy_loss_type"))
    if family is None:
        return UNSET  # reported once, by the policy_loss row
    reduction = r(f"{ALGO}.loss_reduction")
    agg = SKYRL_PRESCALED[reduction][1] if reduction in SKYRL_PRESCALED else SERVER_AGGREGATED.get(reduction)
    return server_loss_for(family, r(ARCTIC_BACKEND), loss_agg_mode=agg or "token-mean")


def _is_family(r: Reader, family: str) -> bool:
    return SKYRL_POLICY_LOSSES.get(r(f"{ALGO}.policy_loss_type")) == family


def clip_ratio_low(r: Reader) -> Any:
    if _is_family(r, "cispo"):  # CISPO clips its IS weight with its own bounds
        return r(f"{ALGO}.cispo.cispo_eps_clip_low")
    return r(f"{ALGO}.eps_clip_low")


def clip_ratio_high(r: Reader) -> Any:
    if _is_family(r, "cispo"):
        return r(f"{ALGO}.cispo.cispo_eps_clip_high")
    return r(f"{ALGO}.eps_clip_high")


def only_with_loss(family: str, field: str) -> Any:
    """A loss family's knob: SkyRL's `field` when `policy_loss_type` is that family, else unset."""

    def knob_of_family(r: Reader) -> Any:
        return r(field) if _is_family(r, family) else UNSET

    return knob_of_family


def loss_agg_mode(value: Any) -> str:
    """SkyRL's loss_reduction -> how the server aggregates the loss (adapter_skyrl.loss_reductions)."""
    if value in SERVER_AGGREGATED:
        return SERVER_AGGREGATED[value]
    if value in SKYRL_PRESCALED:  # SkyRL scales the advantages itself; the KL / entropy terms: this mode
        return SKYRL_PRESCALED[value][0]
    raise FieldProblem("SkyRL 0.4.0 has no such loss reduction", f"use one of {list(LOSS_REDUCTIONS)}")


def pg_loss_agg_mode(r: Reader) -> Any:
    """The policy term of the reductions SkyRL applies to the advantages itself: their sum."""
    reduction = r(f"{ALGO}.loss_reduction")
    return SKYRL_PRESCALED[reduction][1] if reduction in SKYRL_PRESCALED else UNSET


def kl_estimator(value: Any) -> str:
    if value not in KL_ESTIMATORS:
        raise FieldProblem(
            "the server's kl_penalty has no such estimator", f"use one of {list(KL_ESTIMATORS)}"
        )
    return value


def loss_scale_factor(r: Reader) -> Any:
    if r(f"{ALGO}.loss_reduction") != "seq_mean_token_sum_norm":
        return None
    return r(f"{ALGO}.max_seq_len")


def entropy_coeff(r: Reader) -> float:
    return float(r(f"{ALGO}.entropy_loss_coef")) if r(f"{ALGO}.use_entropy_loss") else 0.0


def loss_temperature(r: Reader) -> float:
    algo = r(f"{ALGO}.temperature")
    return float(algo if algo is not None else r("generator.sampling_params.temperature"))


def is_null_0_or_1(value: Any) -> bool:
    return value in (None, 0, 1)


# -- asynchronous training -------------------------------------------------------------------------


def max_staleness(r: Reader) -> Any:
    if not r(f"{FULLY_ASYNC}.enabled"):
        return UNSET  # the core default: 0, the synchronous path
    return int(r(f"{FULLY_ASYNC}.max_staleness_steps")) * int(r("trainer.update_epochs_per_batch"))


def is_weight_cap(r: Reader) -> Any:
    """The token TIS cap of an asynchronous run (SkyRL computes the weights; the core records the cap)."""
    if max_staleness(r) in (UNSET, 0):
        return UNSET
    opc = f"{ALGO}.off_policy_correction"
    if r(f"{opc}.tis_ratio_type") == "token":
        return float(r(f"{opc}.token_tis_ratio_clip_high"))
    if r(f"{opc}.tis_ratio_type") is None and r(f"{ALGO}.use_tis"):
        return float(r(f"{ALGO}.tis_imp_ratio_cap"))
    return UNSET


# -- rule checks -----------------------------------------------------------------------------------


def attn_disagrees_with_flash_attn(f: Fields) -> Found | None:
    attn = f("trainer.arctic_rl.kernels.attn_implementation")
    if attn is None:
        return None
    flash = str(attn).startswith("flash_attention")
    if flash == bool(f("trainer.flash_attn")):
        return None
    return Found(names={"flash_attn": f("trainer.flash_attn"), "want": str(flash).lower()})


def ref_model_is_another(f: Fields) -> Found | None:
    if not f.changed("trainer.ref.model.path") or f("trainer.ref.model.path") == f(
        "trainer.policy.model.path"
    ):
        return None
    return Found(names={"policy": f("trainer.policy.model.path")})


def cortex_resumes_from_path(f: Fields) -> bool:
    return f("trainer.arctic_rl.backend.kind") == "cortex" and f("trainer.resume_mode") == "from_path"


def rollout_cispo_with_tis(f: Fields) -> Found | None:
    rollout_cispo = f(f"{ALGO}.policy_loss_type") == "cispo" and f(f"{ALGO}.cispo.cispo_anchor") == "rollout"
    tis = f(f"{ALGO}.off_policy_correction.tis_ratio_type")
    if not (rollout_cispo and (tis is not None or f(f"{ALGO}.use_tis"))):
        return None
    return Found(value=tis or "token (use_tis)")


def async_colocated(f: Fields) -> Found | None:
    return Found(value=True) if f(f"{FULLY_ASYNC}.enabled") and f("trainer.placement.colocate_all") else None


def async_batch_not_one_mini_batch(f: Fields) -> Found | None:
    mini = f("trainer.policy_mini_batch_size")
    if not f(f"{FULLY_ASYNC}.enabled") or f("trainer.train_batch_size") == mini:
        return None
    return Found(names={"mini": mini})


def async_workers_out_of_range(f: Fields) -> Found | None:
    if not f(f"{FULLY_ASYNC}.enabled"):
        return None
    mini, k = f("trainer.policy_mini_batch_size"), f(f"{FULLY_ASYNC}.max_staleness_steps")
    if mini <= f(f"{FULLY_ASYNC}.num_parallel_generation_workers") <= mini * (k + 1):
        return None
    return Found(names={"low": mini, "high": mini * (k + 1)})


def async_batched_generation(f: Fields) -> Found | None:
    return Found(value=True) if f(f"{FULLY_ASYNC}.enabled") and f("generator.batched") else None


def async_dynamic_sampling(f: Fields) -> bool:
    return bool(f(f"{FULLY_ASYNC}.enabled")) and f(f"{DS}.type") is not None


def async_full_batch_without_filter(f: Fields) -> Found | None:
    wanted = f(f"{FULLY_ASYNC}.enabled") and f(f"{FULLY_ASYNC}.sample_full_batch")
    return Found(value=True) if wanted and not f(f"{ALGO}.zero_variance_filter") else None


def async_loss_not_rollout_anchored(f: Fields) -> bool:
    if not f(f"{FULLY_ASYNC}.enabled"):
        return False
    return not rollout_anchored(f(ALGO)) and f(f"{ALGO}.policy_loss_type") != "dppo"


def unknown_dynamic_sampling(f: Fields) -> bool:
    return f(f"{DS}.type") is not None and f(f"{DS}.type") not in DYNAMIC_SAMPLING_TYPES


def replace_never_replaces(f: Fields) -> bool:
    return f(f"{DS}.type") == "replace" and not 0 <= f(f"{DS}.min_replace_ratio") < 1


def unregistered_environment(f: Fields) -> Found | None:
    """`environment.env_class` (the environment of rows without their own) not in skyrl-gym's registry."""
    env_class = f("environment.env_class")
    if env_class is None or env_class in (known := registered_environments()):
        return None
    return Found(names={"known": ", ".join(known), "env_class": env_class})


def critic_estimator(f: Fields) -> bool:
    return f(f"{ALGO}.advantage_estimator") in CRITIC_ESTIMATORS


def unregistered_estimator(f: Fields) -> Found | None:
    """An advantage estimator SkyRL's registry does not hold in this process (any registered one runs:
    SkyRL's trainer computes the advantages)."""
    name = f(f"{ALGO}.advantage_estimator")
    if name in CRITIC_ESTIMATORS or name in (known := registered_estimators()):
        return None
    free = [n for n in known if n not in CRITIC_ESTIMATORS]
    return Found(names={"known": ", ".join(known), "name": name, "free": free})


def critic_model(f: Fields) -> bool:
    """A critic model with an estimator that does not need one (that one is its own rule's)."""
    return bool(f("trainer.critic.model.path")) and f(f"{ALGO}.advantage_estimator") not in CRITIC_ESTIMATORS


def own_inference_servers(f: Fields) -> Found | None:
    for name in (f"{ENGINE}.external_proxy_url", f"{ENGINE}.external_server_urls"):
        if f(name):
            return Found(field=name)
    return None


def cortex_hf_export(f: Fields) -> bool:
    return f("trainer.arctic_rl.backend.kind") == "cortex" and int(f("trainer.hf_save_interval")) > 0


def adaptive_kl_with_kl_loss(f: Fields) -> bool:
    return bool(f(f"{ALGO}.use_kl_loss")) and f(f"{ALGO}.kl_ctrl.type") != "fixed"


CORTEX_RESUME = CORTEX_LIMITS["load-checkpoint"]

# -- notices ---------------------------------------------------------------------------------------


def language_model_only(f: Fields) -> str | None:
    if not (f("trainer.policy.language_model_only") or f(f"{ENGINE}.language_model_only")):
        return None
    return (
        "language_model_only: the Arctic training job loads AutoModelForCausalLM (the language model of a "
        "multimodal checkpoint only), and the sampler's vLLM gets language_model_only=true"
    )


def prefill_decode_together(f: Fields) -> str | None:
    if not f(f"{ENGINE}.enable_pd"):
        return None
    return (
        "generator.inference_engine.enable_pd: the Arctic sampling job's engines prefill and decode together "
        "(num_prefill, the prefill/decode kwargs and engine_init_kwargs.kv_transfer_config do not apply)"
    )


def hf_export_schedule(f: Fields) -> str | None:
    interval = int(f("trainer.hf_save_interval"))
    if interval <= 0:
        return None
    return (
        f"HF weights every {interval} steps (trainer.hf_save_interval): a backend checkpoint of the step with its "
        f"hf/ copy (save_checkpoint(export_hf=True)) in {f('trainer.export_path')}/global_step_<n>/policy"
    )


def dapo_overlong_punishment(f: Fields) -> str | None:
    """DAPO's soft overlong punishment of the rewards (the DAPO config: adapter_skyrl.dapo)."""
    buffer = f(f"{ALGO}.overlong_buffer_len")
    if buffer is None:
        return None
    return (
        f"DAPO soft overlong punishment: rewards fall linearly over the last {buffer} of "
        f"{f('generator.sampling_params.max_generate_length')} response tokens, by up to "
        f"{f(f'{ALGO}.overlong_buffer_penalty_factor')} (adapter_skyrl.dapo)"
    )


def dapo_overlong_filtering(f: Fields) -> str | None:
    if not f("generator.apply_overlong_filtering"):
        return None
    return (
        "DAPO overlong filtering: a response truncated at generator.sampling_params.max_generate_length "
        "trains no token (all-zero loss mask, as SkyRL's generator sets it)"
    )


def _sample_limit(f: Fields) -> str:
    batches = f(f"{DS}.max_sample_batches")
    return "no limit" if batches <= 0 else f"at most {batches}"


def dynamic_sampling_filter(f: Fields) -> str | None:
    """What SkyRL's synchronous trainer does with `dynamic_sampling.type=filter` (in SkyRL's trainer)."""
    if f(f"{DS}.type") != "filter":
        return None
    return (
        f"dynamic sampling (filter, SkyRL's trainer): groups whose {f('generator.n_samples_per_prompt')} rewards "
        f"are all equal are dropped and the next dataloader batch is generated until "
        f"{f('trainer.train_batch_size')} groups are kept ({_sample_limit(f)} generate calls a step, then the "
        "run stops); the LR schedule counts dataloader batches, as SkyRL's does"
    )


def dynamic_sampling_replace(f: Fields) -> str | None:
    if f(f"{DS}.type") != "replace":
        return None
    return (
        f"dynamic sampling (replace, SkyRL's trainer): groups whose {f('generator.n_samples_per_prompt')} rewards "
        f"are all equal are replaced by copies of groups with reward variance when more than "
        f"{f(f'{DS}.min_replace_ratio'):g} of the batch's groups have it, else the next dataloader batch is "
        f"generated ({_sample_limit(f)} generate calls a step, then the run stops); the LR schedule counts "
        "dataloader batches, as SkyRL's does"
    )


def dynamic_sampling_one_sample(f: Fields) -> str | None:
    if f(f"{DS}.type") in DYNAMIC_SAMPLING_TYPES and f("generator.n_samples_per_prompt") == 1:
        return "dynamic sampling with generator.n_samples_per_prompt=1: SkyRL keeps every group"
    return None


def dynamic_sampling_unused(f: Fields) -> str | None:
    """Dynamic-sampling settings SkyRL's trainer does not read with the type given."""
    kind, unused = f(f"{DS}.type"), []
    if kind is None and f.changed(f"{DS}.max_sample_batches"):
        unused.append(f"max_sample_batches={f(f'{DS}.max_sample_batches')}")
    if kind != "replace" and f.changed(f"{DS}.min_replace_ratio"):
        unused.append(f"min_replace_ratio={f(f'{DS}.min_replace_ratio'):g}")
    if not unused:
        return None
    return (
        f"{DS} {', '.join(unused)} has no effect with type={kind} "
        "(SkyRL reads max_sample_batches with a type, min_replace_ratio with replace)"
    )


# -- legacy keys (adapter_skyrl.legacy_keys) -------------------------------------------------------


def logits_strategy(value: Any) -> str:
    return "none" if value is None else str(value)


def unset_if_none(value: Any) -> Any:
    return UNSET if value is None else value


def legacy_scheduler(value: Any) -> str:
    if value not in ("constant", "cosine"):
        raise FieldProblem(
            "the core schedule is constant or cosine after the warmup", "use constant or cosine"
        )
    return str(value)


# -- the rows SkyRL's generator builds (adapter_skyrl.generator) -----------------------------------------
# The SkyRL fields named as the sources of the row bounds; the bounds also read the generator settings
# that shape a row (max_turns, max_input_length, batched, step-wise, chat turns, stop strings), which keep
# their own passed-through rows: SkyRL's generator reads them.
GENERATED_ROW_FIELDS = ("trainer.max_prompt_length", "generator.sampling_params.max_generate_length")


def _multi_turn(r: Reader) -> bool:
    return int(r("generator.max_turns")) > 1 and not r("generator.batched")


def _max_input_length(r: Reader) -> int:
    value = r("generator.max_input_length")
    return int(r("trainer.max_prompt_length") if value is None else value)


def max_prompt_length(r: Reader) -> int:
    """A row's longest prompt: the first prompt; a step-wise multi-turn row's is the conversation so far."""
    if _multi_turn(r) and r("generator.step_wise_trajectories"):
        return _max_input_length(r)
    return int(r("trainer.max_prompt_length"))


def max_response_length(r: Reader) -> int:
    """The longest response SkyRL's generator makes: one turn of max_generate_length, and the EOS it
    appends (after a stop string in chat turns with append_eos_token_after_stop_str_in_multi_turn, or
    closing a response that continued one message); multi-turn: everything after the first prompt,
    bounded by the last turn's context (max_input_length) and its generation."""
    generate = int(r("generator.sampling_params.max_generate_length"))
    if _multi_turn(r):
        return _max_input_length(r) + generate
    if r("generator.batched"):  # SkyRL's batched path truncates to max_generate_length and appends nothing
        return generate
    stop_eos = bool(r("generator.sampling_params.stop")) and bool(
        r("generator.append_eos_token_after_stop_str_in_multi_turn")
    )
    return generate + int(not r("generator.use_conversation_multi_turn") or stop_eos)


def batched_multi_turn(f: Fields) -> Found | None:
    if f("generator.batched") and int(f("generator.max_turns")) > 1:
        return Found(value=True, names={"max_turns": f("generator.max_turns")})
    return None


def multi_turn_sampling(f: Fields) -> str | None:
    """How a multi-turn run samples, when SkyRL's generator cannot keep token-in / token-out by itself
    (a custom chat template with chat turns) or the server reads text (on-prem)."""
    turns = int(f("generator.max_turns"))
    if turns <= 1 or f("generator.batched"):
        return None
    if f("generator.use_conversation_multi_turn") and f("generator.chat_template.name_or_path") is not None:
        return (
            "multi-turn with a custom chat template and chat turns: SkyRL's generator re-tokenises the history "
            "each turn (its own mode without token-in / token-out): the rows are SkyRL's, unchecked"
        )
    if f("trainer.arctic_rl.backend.kind") in (None, *ONPREM_BACKENDS):
        return (
            f"multi-turn ({turns} turns) through the on-prem server, which takes text: each turn's ids go as their "
            "text and the server's tokenisation is checked; a turn it read as other ids than the row holds "
            "(sampled ids the tokenizer would not make of their text) is not trained (token_drift/turns counts them)"
        )
    return None


def search_retrieval_server(f: Fields) -> str | None:
    """SkyRL's `search` environment asks a retrieval server of the user's own at every <search>: a run
    needs it up; a dry run checks settings and does not contact it."""
    if f("environment.env_class") != "search":
        return None
    url = f("environment.skyrl_gym.search.search_url")
    return (
        f"environment search: every <search> action queries the retrieval server at {url} "
        "(environment.skyrl_gym.search.search_url; SkyRL's examples/train/search/retriever starts one) from the "
        "rollouts, as on vLLM; the dry run does not contact it"
    )
