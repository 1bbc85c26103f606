"""`arctic-rl config`: show the resolved configuration and its plan, validate it, print the
configuration reference."""

from __future__ import annotations

import argparse
import sys

OVERRIDES_HELP = "Hydra-style overrides: key.sub=value, +key=value, ++key=value, ~key"


def _load(args: argparse.Namespace):
    from arctic_rl_core.config import load_config  # noqa: PLC0415 - CLI start-up

    return load_config(args.file, args.overrides)


def run_show(args: argparse.Namespace) -> int:
    from arctic_rl_core.config import ConfigError  # noqa: PLC0415 - CLI start-up

    try:
        cfg = _load(args)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    from arctic_rl_core.config.show import render_config_document  # noqa: PLC0415 - CLI start-up

    sys.stdout.write(render_config_document(cfg, args.json))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from arctic_rl_core.config import ConfigError  # noqa: PLC0415 - CLI start-up

    try:
        cfg = _load(args)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    shape = cfg.shape
    print(
        f"{args.file}: valid ({cfg.backend.kind} backend, {shape.rows_per_step} rows per step, "
        f"train_batch_size {shape.train_batch_size} = micro {shape.micro_batch_size_per_gpu} x grad-accum "
        f"{shape.gradient_accumulation_steps} x data-parallel {shape.data_parallel_size})"
    )
    return 0


def run_reference(args: argparse.Namespace) -> int:
    from arctic_rl_core.config.reference_doc import render_reference  # noqa: PLC0415 - CLI start-up

    sys.stdout.write(render_reference())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "config", help="Show, validate or document the Arctic RL configuration (YAML/TOML + overrides)."
    )
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)

    show = actions.add_parser("show", help="Print the resolved configuration and its plan (YAML, or --json).")
    show.add_argument("file", help="YAML or TOML config file")
    show.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    show.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    show.set_defaults(func=run_show)

    validate = actions.add_parser("validate", help="Check a configuration; exit 1 listing every problem.")
    validate.add_argument("file", help="YAML or TOML config file")
    validate.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    validate.set_defaults(func=run_validate)

    reference = actions.add_parser("reference", help="Print the configuration reference (Markdown).")
    reference.set_defaults(func=run_reference)
