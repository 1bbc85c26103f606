"""The Arctic RL testbed: what tests, laptops and benchmarks run instead of an Arctic GPU cluster.

- `reference`: the CPU reference engine honouring the Arctic server's contract (in-process, as a Ray
  actor, behind the on-prem HTTP API, the Cortex emulator, and the `deepspeed` trainer on
  arctic-platform 0.1.4's own DeepSpeedWorker);
- `demo`: `arctic-rl demo`, a real GRPO run of a tiny model through SkyRL or verl;
- `bench`: `arctic-rl bench`, side-by-side benchmarks;
- `parity`: the traces and scenarios the parity suite compares;
- `cli`: the `serve`, `demo` and `bench` subcommands, added to `arctic-rl` through the
  `arctic_rl.commands` entry points.

Importing this package imports nothing heavy.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("arctic-rl-testbed")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
