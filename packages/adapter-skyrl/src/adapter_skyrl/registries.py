"""What SkyRL's registries hold in this process, checked at dry run by the field table's rules
(`adapter_skyrl.field_table`): the environment class (skyrl-gym's registry, with the Arctic
environments registered), the advantage estimator (`AdvantageEstimatorRegistry`) and the policy loss
(`PolicyLossRegistry`).

SkyRL's examples with a custom environment, estimator or loss register it in their own entry point
(`main_<example>.py`) before SkyRL runs; a run through `adapter_skyrl.main` has exactly what its own
process registered, so a name missing here is missing at run time too.
"""

from __future__ import annotations

from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry, PolicyLossRegistry
from skyrl_gym.envs.registration import registry

# Estimators that need a value model (SkyRL trains a critic for them).
CRITIC_ESTIMATORS = ("gae",)
REGISTER_FIX = (
    "register it in the process that runs the adapter, then start the adapter from there: in your own entry "
    "module call {register}, then adapter_skyrl.main.main() (SkyRL's example does the registration in its own "
    "main module, which the switch to adapter_skyrl.main leaves out)"
)


def registered_environments() -> list[str]:

    return sorted(registry)


def registered_estimators() -> list[str]:
    return sorted(AdvantageEstimatorRegistry.list_available())


def registered_policy_losses() -> list[str]:
    return sorted(PolicyLossRegistry.list_available())
