"""`arctic-rl doctor`: what this environment can run, and what to install for the rest."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import platform
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Stack:
    module: str
    distribution: str
    role: str
    install: str


STACKS: tuple[Stack, ...] = (
    Stack("torch", "torch", "reference backend, tensors", "arctic-rl-testbed[reference]"),
    Stack("transformers", "transformers", "reference backend model", "arctic-rl-testbed[reference]"),
    Stack("ray", "ray", "reference backend as a Ray actor", "arctic-rl-core[ray]"),
    Stack("arctic_platform", "arctic-platform", "Arctic client / wire codec", "arctic-rl-core[transport]"),
    Stack("skyrl", "skyrl", "SkyRL adapter", "adapter-skyrl[cpu] (or [gpu] on a GPU node)"),
    Stack("verl", "verl", "verl adapter", "adapter-verl[cpu] (or [gpu] on a GPU node)"),
    Stack("vllm", "vllm", "GPU inference", "adapter-skyrl[gpu] or adapter-verl[gpu] (GPU only)"),
    Stack("arctic_inference", "arctic-inference", "FCA / Arctic speculative decoding", "adapter-*[gpu]"),
    Stack("deepspeed", "deepspeed", "Arctic training server", "adapter-*[gpu] (GPU only)"),
)


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpu_summary(torch_present: bool) -> str:
    if not torch_present:
        return "unknown (torch not installed)"
    import torch  # the only heavy import, and only when installed

    if torch.cuda.is_available():
        names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
        return f"{torch.cuda.device_count()} x {', '.join(sorted(names))}"
    return "none visible (CPU only)"


CORTEX_TRANSPORT = "arctic_platform.client.transports.cortex"


def cortex_transport_status() -> tuple[bool, str]:
    """Whether arctic-platform's Cortex transport imports here (it needs arctic-platform[cortex]:
    tenacity, requests, urllib3), and why not."""
    try:
        importlib.import_module(CORTEX_TRANSPORT)
    except ImportError as err:
        return False, f"{type(err).__name__}: {err}"
    return True, "imports"


def run(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415 - CLI start-up
    from rich.markup import escape  # noqa: PLC0415 - CLI start-up
    from rich.table import Table  # noqa: PLC0415 - CLI start-up

    console = Console()
    console.print(f"Python {sys.version.split()[0]} ({sys.executable})")
    console.print(f"Platform {platform.platform()}")
    table = Table(title="Optional stacks")
    for column in ("module", "version", "role", "to install"):
        table.add_column(column)
    found: dict[str, bool] = {}
    for stack in STACKS:
        present = importlib.util.find_spec(stack.module) is not None
        found[stack.module] = present
        version = _version(stack.distribution) if present else None
        table.add_row(
            stack.module,
            version or ("[green]present[/]" if present else "[red]missing[/]"),
            stack.role,
            "" if present else escape(stack.install),
        )
    console.print(table)
    if found["arctic_platform"]:
        ok, why = cortex_transport_status()
        verdict = "[green]imports[/]" if ok else f"[red]does not import[/] ({escape(why)})"
        hint = "" if ok else " - install arctic-rl-core[transport] (arctic-platform[transport,cortex]==0.1.4)"
        console.print(f"Cortex transport ({CORTEX_TRANSPORT}): {verdict}{escape(hint)}")
    else:
        console.print("Cortex transport: [red]missing[/] (arctic-platform is not installed)")
    console.print(f"GPU: {_gpu_summary(found['torch'])}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor", help="Show which optional stacks are importable, GPU visibility, and what to install."
    )
    parser.set_defaults(func=run)
