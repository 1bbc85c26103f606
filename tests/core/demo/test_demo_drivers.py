"""The demo's GRPO phase is each adapter's driver, found through the `arctic_rl.demo_drivers`
entry-point group: the core environment has none; a package that registers one is found and loaded;
two packages registering the same framework is an error."""

from __future__ import annotations

import importlib
import sys

import pytest
from arctic_rl_testbed.demo import launch
from arctic_rl_testbed.demo.drivers import (
    ENTRY_POINT_GROUP,
    DriverNotFoundError,
    is_registered,
    load_driver,
    registered_frameworks,
)


def _install_fake_adapter(root, dist: str, module: str, framework: str) -> None:
    """A distribution on sys.path the way an installed wheel looks: a module and its dist-info."""
    (root / f"{module}.py").write_text("def run_grpo(*args, **kwargs):\n    return 'driven'\n")
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{framework} = {module}:run_grpo\n")


@pytest.fixture
def fake_adapter(tmp_path, monkeypatch):
    _install_fake_adapter(tmp_path, "fake-adapter", "fake_adapter_driver", "fakefw")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    sys.modules.pop("fake_adapter_driver", None)


def test_the_core_environment_registers_no_driver():
    # the core depends on no adapter: only an adapter's own distribution registers a driver
    assert registered_frameworks() == []
    assert not is_registered("skyrl")
    with pytest.raises(
        DriverNotFoundError, match=r"framework='skyrl'.*arctic_rl\.demo_drivers.*adapter-skyrl"
    ):
        load_driver("skyrl")


def test_a_registered_driver_is_found_and_loaded(fake_adapter):
    assert registered_frameworks() == ["fakefw"]
    driver = load_driver("fakefw")
    assert driver.__module__ == "fake_adapter_driver"
    assert driver() == "driven"


def test_two_packages_registering_one_framework_is_an_error(fake_adapter):
    _install_fake_adapter(fake_adapter, "other-adapter", "other_adapter_driver", "fakefw")
    with pytest.raises(DriverNotFoundError, match="several packages register"):
        load_driver("fakefw")


def test_in_process_needs_the_adapters_driver_not_only_the_framework(fake_adapter, monkeypatch):
    # the framework importable without its adapter: the demo re-executes in the adapter's environment
    monkeypatch.setitem(launch.FRAMEWORK_MODULES, "fakefw", "json")
    monkeypatch.setitem(launch.FRAMEWORK_MODULES, "nodriver", "json")
    assert launch.framework_importable("fakefw")
    assert not launch.framework_importable("nodriver")
