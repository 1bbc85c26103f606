"""Framework-neutral core of the Arctic RL integration layer.

Importing this package is deliberately cheap: no torch, vLLM, Ray, SkyRL or verl is imported
here or by any module's import-time code path that the light install reaches. Heavy stacks are
imported lazily inside the functions that need them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("arctic-rl-core")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
