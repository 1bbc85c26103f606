"""`arctic-rl demo`: the main job on the embedded default, a real GRPO run of a tiny model on the
bundled BIRD sample (or GSM8K) through SkyRL (or verl), on the CPU reference backend.

Runs in-process when the framework is importable here; otherwise re-executes the driver in the
framework's locked CPU environment with uv (see `arctic_rl_testbed.demo.launch`).
"""

from __future__ import annotations

import argparse
import sys

from arctic_rl_testbed.demo import launch
from arctic_rl_testbed.demo.arguments import add_arguments

# the flags `launch.driver_args` forwards itself (paths made absolute)
LAUNCH_FIELDS = ("framework", "task", "steps", "out", "resume")


def run(args: argparse.Namespace) -> int:
    framework = args.framework or "skyrl"
    # every other flag of the driver, as given (None: not given), in the driver's own order
    extra = {
        action.option_strings[0]: getattr(args, action.dest)
        for action in add_arguments(argparse.ArgumentParser())
        if action.dest not in LAUNCH_FIELDS
    }
    forwarded = launch.driver_args(
        framework=framework, task=args.task, steps=args.steps, out=args.out, resume=args.resume, extra=extra
    )
    if launch.framework_importable(framework):
        from arctic_rl_testbed.demo.run import main as driver_main  # noqa: PLC0415 - CLI start-up

        return driver_main(forwarded)
    try:
        command = launch.uv_launch(framework, forwarded, launch.find_repo_root(), launch.find_uv())
    except launch.LaunchError as error:
        print(f"arctic-rl demo: {error}", file=sys.stderr)
        return 2
    print(
        f"arctic-rl demo: running in the {framework} environment: {' '.join(command.argv)}", file=sys.stderr
    )
    return launch.run_launch(command)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="Run a real GRPO job of a tiny model on the bundled BIRD sample on CPU (SkyRL or verl, reference backend).",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)
