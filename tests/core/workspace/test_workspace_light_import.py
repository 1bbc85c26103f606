"""`import arctic_rl_core` (and the CLI) must stay light: no GPU or framework stack at import."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "vllm", "ray", "skyrl", "verl", "transformers", "deepspeed", "arctic_platform")
LIGHT_MODULES = (
    "arctic_rl_core",
    "arctic_rl_core.cli.main",
    "arctic_rl_core.backends.protocol",
    "arctic_rl_core.config.reference_model",
)

PROBE = """
import importlib, json, sys, time
t0 = time.perf_counter()
for name in {modules!r}:
    importlib.import_module(name)
elapsed = time.perf_counter() - t0
heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))
print(json.dumps({{"seconds": elapsed, "heavy": heavy, "count": len(sys.modules)}}))
"""


def test_core_imports_no_heavy_stack():
    code = PROBE.format(modules=LIGHT_MODULES, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    print(
        f"import of {len(LIGHT_MODULES)} core modules: {report['seconds']:.3f} s, {report['count']} modules"
    )
    assert report["heavy"] == [], f"heavy stacks imported at module import time: {report['heavy']}"
