"""What SkyRL's registries hold in this process, checked at dry run: the environment class
(skyrl-gym's registry, with the Arctic environments registered), the advantage estimator
(`AdvantageEstimatorRegistry`) and the policy loss (`PolicyLossRegistry`).

SkyRL's examples with a custom environment, estimator or loss register it in their own entry point
(`main_<example>.py`) before SkyRL runs; a run through `adapter_skyrl.main` has exactly what its own
process registered, so a name missing here is missing at run time too.
"""

from __future__ import annotations

from typing import Any

from arctic_rl_core.config import ConfigIssue

# Estimators that need a value model (SkyRL trains a critic for them).
CRITIC_ESTIMATORS = ("gae",)
_REGISTER_FIX = (
    "register it in the process that runs the adapter, then start the adapter from there: in your own entry "
    "module call {register}, then adapter_skyrl.main.main() (SkyRL's example does the registration in its own "
    "main module, which the switch to adapter_skyrl.main leaves out)"
)


def registered_environments() -> list[str]:
    import skyrl_gym.envs  # noqa: F401  (registers SkyRL's own environments)
    from skyrl_gym.envs.registration import registry

    import adapter_skyrl.envs  # noqa: F401  (registers the Arctic environments)

    return sorted(registry)


def registered_estimators() -> list[str]:
    from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry

    return sorted(AdvantageEstimatorRegistry.list_available())


def registered_policy_losses() -> list[str]:
    from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry

    return sorted(PolicyLossRegistry.list_available())


def environment_issues(cfg: Any) -> list[ConfigIssue]:
    """`environment.env_class` (the environment of rows without their own) not in skyrl-gym's registry."""
    env_class = cfg.environment.env_class
    known = registered_environments()
    if env_class is None or env_class in known:
        return []
    return [
        ConfigIssue(
            "environment.env_class",
            env_class,
            f"no skyrl-gym environment of that name is registered in this process (registered: {', '.join(known)}), "
            "so every rollout's reward would fail",
            _REGISTER_FIX.format(register=f"skyrl_gym.envs.register(id={env_class!r}, entry_point=...)")
            + ", or use a registered environment",
        )
    ]


def estimator_issues(cfg: Any) -> list[ConfigIssue]:
    """The advantage estimator: registered in SkyRL's registry (any registered one runs: SkyRL's trainer
    computes advantages), and not one that needs the critic the Arctic backend does not train."""
    name = cfg.trainer.algorithm.advantage_estimator
    known = registered_estimators()
    if name in CRITIC_ESTIMATORS:
        return [critic_issue("trainer.algorithm.advantage_estimator", name)]
    if name in known:
        return []
    free = [n for n in known if n not in CRITIC_ESTIMATORS]
    return [
        ConfigIssue(
            "trainer.algorithm.advantage_estimator",
            name,
            f"not registered in SkyRL's AdvantageEstimatorRegistry in this process (registered: {', '.join(known)})",
            _REGISTER_FIX.format(register=f"AdvantageEstimatorRegistry.register({name!r}, your_function)")
            + f", or use one of {free}",
        )
    ]


def critic_issue(path: str, value: Any) -> ConfigIssue:
    return ConfigIssue(
        path,
        value,
        "needs a critic (a value model trained beside the policy); the Arctic backend trains the policy only",
        "use a critic-free estimator (trainer.algorithm.advantage_estimator=grpo, rloo, reinforce++ or maxrl, "
        "or a registered custom one) and unset trainer.critic.model.path",
    )
