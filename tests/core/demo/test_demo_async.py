"""`arctic-rl demo --async K`: the flag reaches `DemoOptions.max_staleness` (and the re-exec), colocated is
refused with the reason, and a driver must declare its asynchronous mode or the run stops before it starts."""

from __future__ import annotations

import argparse
import importlib
import sys

import pytest
from arctic_rl_core.cli import main as cli_main
from arctic_rl_testbed.demo import launch
from arctic_rl_testbed.demo.drivers import (
    ENTRY_POINT_GROUP,
    load_driver,
    require_async_support,
    supports_async,
)
from arctic_rl_testbed.demo.options import DemoOptions
from arctic_rl_testbed.demo.run import resolve_options
from pydantic import ValidationError


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli_main.build_parser().parse_args(["demo", *argv])


def test_async_flag_reaches_the_options_and_the_driver_command_line() -> None:
    args = _parse(["--async", "2", "--steps", "3"])
    assert resolve_options(args).max_staleness == 2
    assert resolve_options(_parse(["--steps", "3"])).max_staleness == 0  # default: synchronous
    forwarded = launch.driver_args(
        framework="verl", task=None, steps=3, out=None, resume=None, extra={"--async": args.max_staleness}
    )
    assert forwarded[-2:] == ["--async", "2"]
    with pytest.raises(SystemExit):
        _parse(["--async", "one"])


def test_async_with_colocate_is_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="take turns on the same devices"):
        DemoOptions(out="x", max_staleness=1, colocate=True)
    with pytest.raises(ValidationError, match="max_staleness"):
        DemoOptions(out="x", max_staleness=-1)


@pytest.fixture
def drivers(tmp_path, monkeypatch):
    """A fake adapter registering two drivers: one declares its asynchronous mode, one does not."""
    (tmp_path / "fake_demo_drivers.py").write_text(
        "def run_async(*args, **kwargs):\n    return 'driven'\n\n\nrun_async.supports_async = True\n\n\n"
        "def run_sync(*args, **kwargs):\n    return 'driven'\n"
    )
    info = tmp_path / "fake_demo_drivers-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-demo-drivers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nasyncfw = fake_demo_drivers:run_async\nsyncfw = fake_demo_drivers:run_sync\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield
    sys.modules.pop("fake_demo_drivers", None)


def test_a_driver_declares_its_asynchronous_mode(drivers) -> None:
    assert supports_async(load_driver("asyncfw")) and not supports_async(load_driver("syncfw"))
    options = DemoOptions(out="x", max_staleness=1)
    require_async_support(load_driver("asyncfw"), options)  # declared: runs
    require_async_support(load_driver("syncfw"), DemoOptions(out="x"))  # synchronous: any driver
    with pytest.raises(
        SystemExit, match=r"--async 1: the skyrl adapter's demo driver has no asynchronous mode"
    ):
        require_async_support(load_driver("syncfw"), options)
