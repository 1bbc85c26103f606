"""The verl adapter's framework internals (`adapter_verl.verl_internals`): every verl/Ray internal it lists still
exists in the installed verl 0.9.1 / Ray with the shape the adapter uses, and the adapter touches
no private framework symbol the list does not name. A new verl release fails here, by name."""

from __future__ import annotations

import inspect

import pytest
from adapter_verl import verl_internals
from adapter_verl.verl_internals import INTERNALS
from framework_internals_checks import problem, unlisted_internals


@pytest.mark.parametrize("entry", INTERNALS, ids=lambda entry: entry.label)
def test_each_listed_internal_still_exists_with_the_shape_used(entry):
    assert problem(entry) is None


def test_every_entry_says_where_and_why():
    for entry in INTERNALS:
        assert entry.used_in.strip() and len(entry.why) > 30, entry.label


def test_the_adapter_touches_no_unlisted_private_framework_symbol():
    assert unlisted_internals("adapter_verl", "adapter_verl.verl_internals", INTERNALS, ("verl", "ray")) == []


def test_the_completeness_check_catches_a_private_access():
    # the scan must be able to fail: without the list, the adapter's overrides are found
    found = unlisted_internals("adapter_verl", "adapter_verl.verl_internals", (), ("verl", "ray"))
    assert any("_init_resource_pool_mgr" in line for line in found)
    assert any("_check_resource_available" in line for line in found)


def test_setup_builds_the_dataloader_before_the_pool_hook_and_the_pools():
    # ArcticTrainer._init_resource_pool_mgr needs the step count (dataloader) and must run before
    # verl creates its resource pools and workers
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    source = inspect.getsource(PPOTrainer._setup)
    order = [
        source.index(call)
        for call in ("_init_dataloader()", "_init_resource_pool_mgr()", "create_resource_pool()")
    ]
    assert order == sorted(order)


def test_pending_sync_metrics_reach_the_step_metrics():
    from adapter_verl.trainer import ArcticTrainer

    trainer = ArcticTrainer.__new__(ArcticTrainer)  # verl's attribute protocol only, no set-up
    verl_internals.add_step_metrics(trainer, {"arctic/weights_version": 3})
    verl_internals.add_step_metrics(trainer, {"arctic/sync_time_s": 0.5})
    assert trainer._consume_sync_metrics() == {"arctic/weights_version": 3, "arctic/sync_time_s": 0.5}
    assert trainer._consume_sync_metrics() == {}


def test_the_replica_server_is_what_verl_reports():
    from adapter_verl.replica import ArcticRolloutReplica

    replica = ArcticRolloutReplica.__new__(ArcticRolloutReplica)  # verl's properties only, no set-up
    handle = object()
    verl_internals.set_replica_server(replica, handle, "arctic-replica-0")
    assert replica.server_handle is handle
    assert replica.server_address == "arctic-replica-0"


def test_the_weights_version_key_is_what_verls_client_reads():
    from verl.workers.rollout import llm_server

    assert f'extra_fields.get("{verl_internals.WEIGHTS_VERSION_KEY}")' in inspect.getsource(llm_server)


def test_the_shape_check_can_fail():
    from dataclasses import replace

    override = next(entry for entry in INTERNALS if entry.kind == "override")
    assert "parameters are" in problem(replace(override, params=(*override.params, "not_a_param")))
    assert "has no" in problem(replace(override, name="_no_such_method"))
    assert "is gone" in problem(replace(override, owner=override.owner + "Gone"))
    attribute = next(entry for entry in INTERNALS if entry.kind == "instance attribute")
    assert "no longer assigns" in problem(replace(attribute, name="_no_such_attribute"))
