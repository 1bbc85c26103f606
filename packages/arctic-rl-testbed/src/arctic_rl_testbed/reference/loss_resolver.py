"""`processing.loss_fn` names -> callables, the way arctic-platform 0.1.4's worker resolves them
(`common/registry.py: resolve_fn`): a registered name is looked up; any other name containing a dot
is `module.function`, imported with `importlib.import_module(module)` and `getattr`, once per
process. The reference implements its registered losses itself (`pipeline`); this module serves
the dotted paths, which it calls with the server's signature
`fn(model_outputs, batch, meta, config, device) -> (loss, metrics)`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

_CACHE: dict[str, Callable[..., Any]] = {}
_LOCK = threading.Lock()


def resolve_loss_fn(name: str) -> Callable[..., Any]:
    """The callable behind the dotted path `name`; errors name the module and the fix."""
    with _LOCK:
        if name in _CACHE:
            return _CACHE[name]
    if "." not in name:
        raise ValueError(f"processing.loss_fn={name!r} is not a dotted path module.function")
    module_path, fn_name = name.rsplit(".", 1)
    try:
        module = importlib.import_module(module_path)
    except ImportError as err:
        raise ImportError(
            f"processing.loss_fn={name!r}: the server cannot import module {module_path!r} ({err}); install the "
            "package that provides it in the server's environment (for arctic_rl_losses: arctic-rl-core)"
        ) from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise AttributeError(
            f"processing.loss_fn={name!r}: module {module_path!r} has no function {fn_name!r}"
        )
    with _LOCK:
        _CACHE[name] = fn
    return fn
