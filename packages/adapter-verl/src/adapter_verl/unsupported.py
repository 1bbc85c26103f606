"""Runs the Arctic stack cannot do at all, found once each from verl's composed config, before verl's
own startup check (which would fail on one of them first: with a critic it loads the critic's
tokenizer, a download):

- a critic (PPO with GAE, or `critic.enable=true`): the Arctic server trains the policy only;
- vision or video inputs: the arctic rollout takes token prompts only (the adapter's rollout replica
  refuses image / video data at run time, and arctic-platform 0.1.4's wire carries none);
- Ascend NPUs (`trainer.device=npu`): the Arctic server runs on NVIDIA GPUs (vLLM, DeepSpeed, CUDA IPC).

Each is one problem, 'field=value: why. Fix: ...', and the fields it covers (the mapping table's own
rows for them are then not reported a second time)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arctic_rl_core.config.model_type import model_type_of
from omegaconf import OmegaConf

from adapter_verl.command_line import override_key

A = "actor_rollout_ref.actor"
# data settings that feed images or video to the model (given on the command line)
VISION_DATA_KEYS = ("data.image_key", "data.video_key", "data.image_patch_size", f"{A}.freeze_vision_tower")
CRITIC_FREE = "grpo, rloo, reinforce_plus_plus, remax, gpg, opo, grpo_passk or another critic-free estimator"


@dataclass
class Refusals:
    problems: list[str] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)  # fields whose other problems these replace


def _get(config: Any, dotted: str) -> Any:
    return OmegaConf.select(config, dotted, default=None)


def critic(config: Any) -> str | None:
    """The critic problem, as verl decides it needs one (`need_critic`)."""
    enable = _get(config, "critic.enable")
    estimator = _get(config, "algorithm.adv_estimator")
    if enable is not None:
        if not enable:
            return None
        return (
            "critic.enable=true: a critic (value model) is trained beside the policy, and the Arctic server trains "
            "the policy only (no value-model job). Fix: set critic.enable=false with a critic-free "
            f"algorithm.adv_estimator ({CRITIC_FREE})"
        )
    if estimator != "gae":
        return None
    return (
        "algorithm.adv_estimator=gae: GAE needs a critic (value model), and the Arctic server trains the policy "
        f"only (no value-model job). Fix: set algorithm.adv_estimator to {CRITIC_FREE}"
    )


def vision(config: Any, overrides: Sequence[str]) -> tuple[str, str] | None:
    """(field, problem) when the run feeds images or video to the policy."""
    why = (
        "the arctic rollout takes token prompts only: the adapter's rollout replica refuses image and video "
        "data, and arctic-platform 0.1.4's sampler and training wire carry none"
    )
    fix = "train a text model on text prompts (a vision-language model is not served on the Arctic path)"
    given = {override_key(o): o.partition("=")[2] for o in overrides}
    for key in VISION_DATA_KEYS:
        if key in given and (key != f"{A}.freeze_vision_tower" or str(given[key]).lower() == "true"):
            return key, f"{key}={given[key]}: the run feeds images or video to the model; {why}. Fix: {fix}"
    path = _get(config, "actor_rollout_ref.model.path")
    found = model_type_of(str(path)) if path else None
    if found is not None and found.has_vision:
        key = "actor_rollout_ref.model.path"
        return key, (
            f"{key}={path}: a vision-language model ({found.model_type}, from {found.source}); {why}. Fix: {fix}"
        )
    return None


def npu(config: Any) -> str | None:
    device = _get(config, "trainer.device")
    if str(device).lower() != "npu":
        return None
    return (
        "trainer.device=npu: the Arctic server runs on NVIDIA GPUs (vLLM sampling, DeepSpeed training, CUDA IPC "
        "weight sync); Ascend NPUs are not supported. Fix: run on NVIDIA GPUs and remove trainer.device (verl's "
        "workers on the Arctic path are CPU forwarders)"
    )


def refusals(config: Any, overrides: Sequence[str]) -> Refusals:
    found = Refusals()
    problem = critic(config)
    if problem is not None:
        found.problems.append(problem)
        found.covered |= {"algorithm.adv_estimator", "critic.enable", "critic"}
    seen = vision(config, overrides)
    if seen is not None:
        found.problems.append(seen[1])
        found.covered |= {seen[0], "data.return_multi_modal_inputs", f"{A}.freeze_vision_tower"}
    problem = npu(config)
    if problem is not None:
        found.problems.append(problem)
        found.covered.add("trainer.device")
    return found


def estimator_problem(config: Any) -> str | None:
    """`algorithm.adv_estimator` must be one of verl's registered estimators (what verl's trainer looks up)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY  # noqa: PLC0415 - CLI start-up

    name = _get(config, "algorithm.adv_estimator")
    if name is None or str(name) in ADV_ESTIMATOR_REGISTRY:
        return None
    known = sorted(ADV_ESTIMATOR_REGISTRY)
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    fix = (
        f"did you mean algorithm.adv_estimator={close[0]}?" if close else f"choose one of {', '.join(known)}"
    )
    return f"algorithm.adv_estimator={name}: not an advantage estimator verl 0.9.1 registers. Fix: {fix}"
