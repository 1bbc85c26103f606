"""Start (or reach) the backend a run's core config names, and return its picklable handle."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arctic_rl_core.backends.protocol import BackendHandle

    from adapter_verl.config import ArcticVerlSettings


def start_backend(settings: ArcticVerlSettings) -> BackendHandle:
    """The backend of `settings.core` as a handle every Ray process of the job can `connect()`."""
    cfg = settings.arctic_config()
    raise NotImplementedError(
        f"backend.kind={cfg.backend.kind!r}: no backend factory in arctic_rl_core yet; pass a handle "
        "to adapter_verl.session.start_session"
    )
