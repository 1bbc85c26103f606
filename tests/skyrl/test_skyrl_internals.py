"""The SkyRL adapter's framework internals (`adapter_skyrl.skyrl_internals`): every SkyRL internal it lists still
exists in the installed SkyRL 0.4.0 with the shape the adapter uses, and the adapter touches
no private framework symbol the list does not name. A new SkyRL release fails here, by name."""

from __future__ import annotations

import pytest
from adapter_skyrl.skyrl_internals import INTERNALS
from framework_internals_checks import problem, unlisted_internals


@pytest.mark.parametrize("entry", INTERNALS, ids=lambda entry: entry.label)
def test_each_listed_internal_still_exists_with_the_shape_used(entry):
    assert problem(entry) is None


def test_every_entry_says_where_and_why():
    for entry in INTERNALS:
        assert entry.used_in.strip() and len(entry.why) > 30, entry.label


def test_the_adapter_touches_no_unlisted_private_framework_symbol():
    assert (
        unlisted_internals(
            "adapter_skyrl", "adapter_skyrl.skyrl_internals", INTERNALS, ("skyrl", "skyrl_gym")
        )
        == []
    )


def test_the_completeness_check_catches_a_private_access():
    # the scan must be able to fail: without the list, the adapter's overrides are found
    found = unlisted_internals("adapter_skyrl", "adapter_skyrl.skyrl_internals", (), ("skyrl", "skyrl_gym"))
    assert any("_execute_forward_pass" in line for line in found)
    assert any("_setup_trainer" in line for line in found)


def test_an_empty_dispatch_and_experiment_state_is_what_skyrl_builds():
    # the accessors leave what the SkyRL base classes would: no actor groups, no inference servers
    from adapter_skyrl.skyrl_internals import INFERENCE_SERVER_STATE, no_actor_groups, no_inference_servers
    from skyrl.backends.skyrl_train.workers.worker_dispatch import WorkerDispatch
    from skyrl.train.entrypoints.main_base import BasePPOExp

    dispatch = WorkerDispatch.__new__(WorkerDispatch)
    no_actor_groups(dispatch)
    assert dispatch._actor_groups == {} and dispatch._gpu_state == {}
    experiment = BasePPOExp.__new__(BasePPOExp)
    no_inference_servers(experiment)
    assert all(getattr(experiment, name) is None for name in INFERENCE_SERVER_STATE)


def test_the_shape_check_can_fail():
    from dataclasses import replace

    override = next(entry for entry in INTERNALS if entry.kind == "override")
    assert "parameters are" in problem(replace(override, params=(*override.params, "not_a_param")))
    assert "has no" in problem(replace(override, name="_no_such_method"))
    assert "is gone" in problem(replace(override, owner=override.owner + "Gone"))
    attribute = next(entry for entry in INTERNALS if entry.kind == "instance attribute")
    assert "no longer assigns" in problem(replace(attribute, name="_no_such_attribute"))
