"""Thread modes (R27): the guardian keeps each thread's mode so it outlives front-ends.

The guardian only stores and returns the mode; the front-end enforces it (it parses the
command line before anything reaches a terminal). ``thread.mode`` also returns the shell's
current directory, against which relative redirection targets are resolved.
"""

from __future__ import annotations

from typing import Any

from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.threads import Threads
from tether.protocol.envelope import Request
from tether.protocol.methods import ModeSpec, Scoped, ThreadModeParams, ThreadSetModeParams
from tether.shared.catalog import Catalog

#: The mode of a thread whose mode was never changed.
DEFAULT_MODE = ModeSpec()


class ThreadModes:
    """``thread.mode`` and ``thread.set_mode`` over this guardian's catalog."""

    def __init__(self, *, scope: Scope, catalog: Catalog, threads: Threads) -> None:
        self._scope = scope
        self._catalog = catalog
        self._threads = threads

    def handlers(self) -> dict[str, Any]:
        return {"thread.mode": self.get_mode, "thread.set_mode": self.set_mode}

    async def get_mode(self, request: Request, params: ThreadModeParams) -> dict[str, Any]:
        return self._answer(params)

    async def set_mode(self, request: Request, params: ThreadSetModeParams) -> dict[str, Any]:
        self._scope.thread_for(params)
        self._catalog.set_thread_mode(params.thread_id, params.mode.model_dump(mode="json"))
        return self._answer(params)

    def _answer(self, params: Scoped) -> dict[str, Any]:
        thread = self._scope.thread_for(params)
        stored = self._catalog.get_thread_mode(params.thread_id)
        mode = DEFAULT_MODE if stored is None else ModeSpec.model_validate(stored)
        return {"mode": mode.model_dump(mode="json"),
                "cwd": self._threads.cwd(params.thread_id, thread["cwd"])}
