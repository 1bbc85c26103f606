"""The one folder the reference HTTP server may touch: every caller-chosen path (`/initialize`'s
`checkpoint_path`, `/save`'s and `/load-checkpoint`'s `path`) must resolve inside it.

A relative path resolves from the root (not from the server's working directory); an absolute
one must already be inside it. Symlinks are resolved before the check, so a link inside the root
that points out of it is refused too. A refusal is a 403 naming the field, the value, the root
and the fix, and happens before any file operation.

No root given: a fresh temporary folder for this server run (`TEMPORARY_PREFIX` under the system's
temp directory), made on first use and removed when the server closes, so a server started in a
checkout leaves nothing there. A given root is never removed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

TEMPORARY_PREFIX = "arctic-rl-serve-"


class PathRefused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class FileRoot:
    def __init__(self, root: str | Path | None) -> None:
        self._root = None if root is None else Path(root).expanduser().resolve()
        self.temporary = root is None

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX)).resolve()
        return self._root

    def describe(self) -> str:
        """The line a server prints at start: where its files go, and whether they outlive it."""
        if self.temporary:
            return (
                f"file root: {self.root} (a temporary folder, removed when the server stops; "
                "--file-root DIR keeps the files)"
            )
        return f"file root: {self.root}"

    def remove_temporary(self) -> None:
        """Delete the folder if this object made it (a given root stays); the next use makes a new one."""
        if self.temporary and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def resolve(self, field: str, value: Any) -> Path:
        """`value` (a client's path) as an absolute path inside the root, or `PathRefused`."""
        if not isinstance(value, str) or not value:
            raise PathRefused(422, f"{field}={value!r}: must be a non-empty path string")
        if "\x00" in value:
            raise PathRefused(422, f"{field}={value!r}: a path cannot contain a NUL character")
        candidate = Path(value).expanduser()
        if not candidate.is_absolute():
            candidate = self.root / candidate
        resolved = candidate.resolve()
        if not resolved.is_relative_to(self.root):
            raise PathRefused(
                403,
                f"{field}={value!r} is outside the server's file root {self.root}: give a path under it "
                "(a relative path resolves from it), or start the server with --file-root set to a folder "
                "that contains it",
            )
        return resolved

    def shown(self, path: str | Path) -> str:
        """`path` relative to the root, for responses that must not reveal the server's layout."""
        try:
            return str(Path(path).relative_to(self.root))
        except ValueError:
            return "(outside the file root)"
