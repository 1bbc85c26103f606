"""A write the kernel really refuses, without root: `file_size_limit(n)` lowers this process's
RLIMIT_FSIZE, so a write past byte `n` of any file fails with EFBIG (SIGXFSZ ignored meanwhile),
through the writer's own error path: what a full disk does to torch.save (a RuntimeError without the
errno) or safetensors (a SafetensorError naming it). Keep the block short: every file this process
writes is limited while it runs."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def file_size_limit(nbytes: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
