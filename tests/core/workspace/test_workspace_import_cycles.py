"""No import cycles, anywhere in the workspace's five packages (issue 30).

The graph is grimp's (the library import-linter is built on), read from the sources the way
`bash tests/run.sh lint` reads them: every module of the five packages, imports inside functions and
under `if TYPE_CHECKING:` included. A cycle fails the test with its modules, in import order.
import-linter's `acyclic_siblings` contracts (pyproject.toml) check the same between sibling modules;
this test also sees cycles through a package's `__init__`, which no sibling contract covers.
"""

from __future__ import annotations

import graphlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = {
    "arctic-rl-core": "arctic_rl_core",
    "arctic-rl-losses": "arctic_rl_losses",
    "arctic-rl-testbed": "arctic_rl_testbed",
    "adapter-skyrl": "adapter_skyrl",
    "adapter-verl": "adapter_verl",
}

# grimp finds a package through the import system; the adapters are not installed in the core
# environment, so the graph is built in a subprocess whose path holds every package's src/.
GRAPH = """
import json, sys
import grimp
graph = grimp.build_graph(*sys.argv[1:], cache_dir=None)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}))
"""


def import_cycles(imports: dict[str, list[str]]) -> list[list[str]]:
    """Cycles of an import graph (module -> the modules it imports), each once, as the modules in
    import order, first module repeated at the end. graphlib names one cycle at a time; the test
    removes that cycle's last import and asks again until none is left."""
    graph = {module: set(imported) for module, imported in imports.items()}
    cycles = []
    while True:
        # TopologicalSorter takes predecessors: an importer comes after what it imports
        try:
            graphlib.TopologicalSorter(graph).prepare()
        except graphlib.CycleError as error:
            found = list(reversed(error.args[1]))
            cycles.append(found)
            graph[found[-2]].discard(found[-1])
            continue
        return cycles


def test_the_cycle_finder_names_each_cycle_in_import_order():
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p")]:
        graph.add_import(importer=importer, imported=imported)
    graph.add_import(importer="p", imported="p.c")  # a package's __init__ importing back its module
    imports = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles = import_cycles(imports)
    assert len(cycles) == 2
    as_sets = sorted(sorted(set(c)) for c in cycles)
    assert as_sets == [["p", "p.c", "p.d"], ["p.a", "p.b", "p.c"]]
    for cycle in cycles:
        assert cycle[0] == cycle[-1]
        assert all(b in imports[a] for a, b in itertools.pairwise(cycle))
    assert import_cycles({"p.a": ["p.b"], "p.b": []}) == []


def test_the_workspace_has_no_import_cycle():
    path = os.pathsep.join(str(ROOT / "packages" / dist / "src") for dist in PACKAGES)
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        [sys.executable, "-c", GRAPH, *PACKAGES.values()], capture_output=True, text=True, check=True, env=env
    ).stdout
    imports = json.loads(out)
    # the graph is the sources': every module file of the five packages, none missing
    files = set()
    for dist in PACKAGES:
        src = ROOT / "packages" / dist / "src"
        for file in src.rglob("*.py"):
            parts = file.relative_to(src).with_suffix("").parts
            files.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert set(imports) == files
    assert "arctic_rl_core.config.schema" in imports["arctic_rl_core.config.run_config"]
    cycles = import_cycles(imports)
    assert cycles == [], "import cycles (each module imports the next):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )
