"""The demo's framework drivers, found through the `arctic_rl.demo_drivers` entry-point group.

The core's demo is framework-neutral (tasks, warm start, evaluation, run log, plots, the command);
the GRPO phase runs through a driver that each adapter owns and registers in its pyproject:

    [project.entry-points."arctic_rl.demo_drivers"]
    <framework> = "<the adapter's import name>.demo_driver:run_grpo"

A driver is a `DemoDriver`: it runs (or resumes) `options.steps` GRPO steps of `task` through the
framework's own trainer on the reference backend and returns a backend whose sampler holds the
final weights (the caller measures accuracy on it and shuts it down).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from arctic_rl_core.checkpoint_manifest import CheckpointFolder

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import Backend

    from arctic_rl_testbed.demo.options import DemoOptions
    from arctic_rl_testbed.demo.tasks import DemoTask

ENTRY_POINT_GROUP = "arctic_rl.demo_drivers"


class DemoDriver(Protocol):
    """`on_ready(first_step, overrides, arctic_config)` before training (a resumed run starts after
    its latest checkpoint); `on_backend(location)` once the backend runs (where, pid, hostname[,
    node_id]); `on_step(step, record)` after every step (the keys of `run_log.step_line`)."""

    def __call__(
        self,
        options: DemoOptions,
        task: DemoTask,
        *,
        model_path: Path,
        on_step: Callable[[int, dict[str, Any]], None],
        on_ready: Callable[[int, list[str], dict[str, Any]], None],
        on_backend: Callable[[dict[str, Any]], None],
    ) -> Backend: ...


ASYNC_SUPPORT_ATTRIBUTE = "supports_async"


def supports_async(driver: DemoDriver) -> bool:
    """Whether a driver runs `options.max_staleness > 0` (`arctic-rl demo --async K`) through its
    framework's asynchronous trainer. A driver declares it by setting the attribute on itself:
    `run_grpo.supports_async = True` (its module, after the function)."""
    return getattr(driver, ASYNC_SUPPORT_ATTRIBUTE, False) is True


def require_async_support(driver: DemoDriver, options: DemoOptions) -> None:
    """`--async K` with a driver that has no asynchronous mode is an error, never a synchronous run."""
    if options.max_staleness and not supports_async(driver):
        raise SystemExit(
            f"--async {options.max_staleness}: the {options.framework} adapter's demo driver has no asynchronous "
            f"mode (it does not declare run_grpo.{ASYNC_SUPPORT_ATTRIBUTE} = True); run without --async"
        )


MULTI_TURN_SUPPORT_ATTRIBUTE = "supports_multi_turn"


def require_multi_turn_support(driver: DemoDriver, options: DemoOptions) -> None:
    """`--max-turns N > 1` with a driver that runs no multi-turn episodes is an error, never a
    single-turn run. A driver declares it with `run_grpo.supports_multi_turn = True`."""
    if options.max_turns > 1 and getattr(driver, MULTI_TURN_SUPPORT_ATTRIBUTE, False) is not True:
        raise SystemExit(
            f"--max-turns {options.max_turns}: the {options.framework} adapter's demo driver runs no multi-turn "
            f"episodes (it does not declare run_grpo.{MULTI_TURN_SUPPORT_ATTRIBUTE} = True); run without --max-turns"
        )


CHECKPOINT_LAYOUT_ATTRIBUTE = "checkpoint_layout"


def checkpoint_folder(driver: DemoDriver, run_dir: Path) -> CheckpointFolder | None:
    """The framework's checkpoint folder of a run, from the driver's declaration
    `run_grpo.checkpoint_layout = (folder under the run directory, the framework's latest-step file)`;
    None when the driver declares none (its resumes are then not checked by the demo)."""

    layout = getattr(driver, CHECKPOINT_LAYOUT_ATTRIBUTE, None)
    if layout is None:
        return None
    folder, latest_file = layout
    return CheckpointFolder(Path(run_dir) / folder, latest_file)


class DriverNotFoundError(LookupError):
    """No installed package registers a demo driver for the framework."""


def registered_frameworks() -> list[str]:
    """The frameworks whose adapter (with its demo driver) is installed in this environment."""
    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def is_registered(framework: str) -> bool:
    return framework in registered_frameworks()


def load_driver(framework: str) -> DemoDriver:
    """The registered driver of `framework` (imports the adapter and its framework)."""
    found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == framework]
    if not found:
        raise DriverNotFoundError(
            f"framework={framework!r}: no demo driver is registered in the entry-point group "
            f"{ENTRY_POINT_GROUP!r} of this environment (registered: {registered_frameworks() or 'none'}); "
            f"install adapter-{framework} here, or run `uv run arctic-rl demo --framework {framework}` "
            "from the repository, which runs the demo in that adapter's environment"
        )
    if len({ep.value for ep in found}) > 1:
        raise DriverNotFoundError(
            f"framework={framework!r}: several packages register a demo driver "
            f"({sorted(ep.value for ep in found)}); uninstall all but one"
        )
    return found[0].load()
