"""`BorrowedBackend`: a backend reached through a handle. Every call goes to the owner's backend;
`shutdown()` only detaches, because a handle never destroys what it did not create."""

from __future__ import annotations

from arctic_rl_core.backends.forwarding import ForwardingBackend
from arctic_rl_core.backends.protocol import Backend


class BorrowedBackend(ForwardingBackend):
    @property
    def target(self) -> Backend:
        if self._target is None:
            raise RuntimeError("this borrowed backend was detached by shutdown(): connect the handle again")
        return self._target

    @property
    def owner(self) -> Backend:
        return self.target

    async def shutdown(self) -> None:
        self._target = None
