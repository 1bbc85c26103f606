"""The one backend registry (`arctic_rl_core.backends.registry`): `backend.kind` -> the factory an
installed package declares in the `arctic_rl.backends` entry points (the core: ray, http, cortex; the
testbed: reference); a kind nobody declares, or two packages declaring one, is an error naming the fix."""

from __future__ import annotations

import asyncio
from importlib.metadata import EntryPoint
from typing import get_args

import pytest
from arctic_rl_core.backends import arctic, registry
from arctic_rl_core.config import load_config
from arctic_rl_core.config.schema import BackendSettings
from arctic_rl_testbed.reference import factory
from arctic_rl_testbed.reference.engine import ReferenceBackend

TINY = [
    f"backend.reference.{k}={v}"
    for k, v in {"num_layers": 1, "hidden_size": 32, "intermediate_size": 64}.items()
]


def test_every_kind_the_schema_accepts_has_exactly_its_package_factory():
    kinds = set(get_args(BackendSettings.model_fields["kind"].annotation))
    assert kinds == {"ray", "http", "cortex", "reference"}
    assert set(registry.installed_kinds()) == kinds
    for kind in ("ray", "http", "cortex"):
        assert registry.backend_factory(kind) is arctic.create_backend
    assert registry.backend_factory("reference") is factory.create_backend
    assert set(registry.PROVIDERS) == kinds


def test_the_reference_kind_builds_the_engine_the_config_describes():
    cfg = load_config(None, ["backend.kind=reference", "optimizer.lr=0.003", "determinism.seed=7", *TINY])
    backend = registry.create_backend(cfg)
    try:
        assert type(backend) is ReferenceBackend
        settings = backend.settings
        assert (
            settings.optimizer.lr,
            settings.seed,
            settings.model.num_layers,
            settings.model.hidden_size,
        ) == (
            0.003,
            7,
            1,
            32,
        )
    finally:
        asyncio.run(backend.shutdown())


def test_a_kind_no_installed_package_declares_names_the_package(monkeypatch):
    core_only = [
        EntryPoint(kind, "arctic_rl_core.backends.arctic:create_backend", registry.ENTRY_POINT_GROUP)
        for kind in ("ray", "http", "cortex")
    ]
    monkeypatch.setattr(
        registry, "entry_points", lambda group: core_only if group == registry.ENTRY_POINT_GROUP else []
    )
    cfg = load_config(None, ["backend.kind=reference", *TINY])
    with pytest.raises(registry.BackendNotInstalledError) as info:
        registry.create_backend(cfg)
    text = str(info.value)
    assert "backend.kind='reference'" in text and "installed: cortex, http, ray" in text
    assert text.endswith("Fix: install arctic-rl-testbed[reference,ray]")


def test_a_kind_two_packages_declare_is_refused(monkeypatch):
    twice = [
        EntryPoint(
            "reference", "arctic_rl_testbed.reference.factory:create_backend", registry.ENTRY_POINT_GROUP
        ),
        EntryPoint("reference", "other_package.backend:create", registry.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda group: twice)
    with pytest.raises(registry.BackendNotInstalledError, match="more than one installed package"):
        registry.backend_factory("reference")
