"""The demo's flags, shared by `arctic-rl demo` and the driver (`arctic_rl_testbed.demo.run`). Light:
`arctic-rl --help` builds the demo's parser from them without loading the driver."""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The flags shared by `arctic-rl demo` and this driver (None = the default / the resumed run's);
    returns them, in order, for `arctic-rl demo` to forward every one to the driver."""
    actions: list[argparse.Action] = []

    def add(*names: str, **kwargs: Any) -> None:
        actions.append(parser.add_argument(*names, **kwargs))

    add("--framework", choices=("skyrl", "verl"), default=None, help="RL framework (default skyrl)")
    add("--task", choices=("bird", "gsm8k"), default=None, help="bundled sample (default bird)")
    add("--steps", type=int, default=None, help="GRPO steps (default 24)")
    add("--out", default=None, help="run directory (default runs/demo-<UTC timestamp>)")
    add("--resume", default=None, metavar="DIR", help="continue the run in DIR")
    add("--seed", type=int, default=None, help="seeds the model, sampling and data order (default 42)")
    add("--warm-start-steps", type=int, default=None, help="supervised steps (default 80)")
    add("--prompts-per-step", type=int, default=None, help="prompts per GRPO step (default 4)")
    add("--rollouts-per-prompt", type=int, default=None, help="GRPO group size (default 8)")
    add("--lr", type=float, default=None, help="GRPO learning rate (default 1e-4)")
    add(
        "--eval-samples",
        type=int,
        default=None,
        help="sampled answers per question in the accuracy (default 8)",
    )
    add("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    add(
        "--server",
        default=None,
        metavar="URL",
        help="run GRPO against the Arctic on-prem HTTP API at URL (e.g. `arctic-rl serve --reference`'s "
        "http://127.0.0.1:8000) through the real client (default: the in-process reference engine)",
    )
    add(
        "--backend",
        choices=("http", "cortex"),
        default=None,
        help="the API at --server: the Arctic on-prem HTTP API (default) or Snowflake Cortex's (e.g. "
        "`arctic-rl serve --reference --api cortex`'s; the token is read from ARCTIC_CORTEX_PAT)",
    )
    add(
        "--colocate",
        action="store_true",
        default=None,
        help="colocated GRPO: training and sampling share the devices, with sleep/wake every step",
    )
    add(
        "--max-turns",
        type=int,
        default=None,
        metavar="N",
        help="BIRD multi-turn: the model may run SQL against the database (shown as an observation) up to N "
        "turns before its <solution> (SkyRL-SQL's protocol); the accuracy and the turns taken are shown "
        "before and after GRPO (default 1: single turn)",
    )
    add(
        "--trainer",
        choices=("torch", "deepspeed"),
        default=None,
        help="who trains: the reference engine's torch trainer (default), or 'deepspeed': arctic-platform "
        "0.1.4's own server code and DeepSpeedWorker on the CPU (warm start in process; GRPO through a local "
        "`arctic-rl serve --reference --trainer deepspeed` and the real client); not with --server",
    )
    add(
        "--async",
        dest="max_staleness",
        type=int,
        default=None,
        metavar="K",
        help="asynchronous GRPO through the framework's own asynchronous trainer: the next batches are "
        "generated while the current one trains, no rollout older than K steps is trained "
        "(async.max_staleness; default 0 = synchronous; not with --colocate)",
    )
    return actions
