"""Thread modes (R27): the guardian keeps each thread's mode so it outlives front-ends.

The front-end enforces a mode (it parses the command line before anything is sent); the
guardian stores it, returns it with the shell's cwd (``thread.mode``), and makes sure that
what is typed was checked against the mode the thread has *now*: every input-bearing request
names the mode it was checked against (:class:`ModeGuard`), and one checked against another
mode is refused with ``mode_changed`` before anything is typed. So a front-end that has not
seen a change (another front-end made it) cannot type past it, and needs no extra round
trip to learn the mode before each command.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.threads import Threads
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import (
    MODE_GUARDED,
    ModeGuard,
    ModeSpec,
    Scoped,
    ThreadModeParams,
    ThreadSetModeParams,
    mode_fingerprint,
)
from tether.protocol.results import ThreadModeResult
from tether.shared.catalog import Catalog

#: The mode of a thread whose mode was never changed.
DEFAULT_MODE = ModeSpec()
DEFAULT_FINGERPRINT = mode_fingerprint(DEFAULT_MODE)


class ThreadModes:
    """``thread.mode`` and ``thread.set_mode``, and the mode guard of input-bearing requests."""

    def __init__(self, *, scope: Scope, catalog: Catalog, threads: Threads) -> None:
        self._scope = scope
        self._catalog = catalog
        self._threads = threads

    def handlers(self) -> dict[str, Any]:
        return {"thread.mode": self.get_mode, "thread.set_mode": self.set_mode}

    async def get_mode(self, request: Request, params: ThreadModeParams) -> ThreadModeResult:
        return self._answer(params)

    async def set_mode(self, request: Request, params: ThreadSetModeParams) -> ThreadModeResult:
        self._scope.thread_for(params)
        self._catalog.set_thread_mode(params.thread_id, params.mode.model_dump(mode="json"))
        return self._answer(params)

    def guard(self, request: Request) -> None:
        """Refuse an input-bearing request checked against a mode the thread no longer has."""
        if request.method not in MODE_GUARDED:
            return
        try:
            guard = ModeGuard.model_validate(request.params)
        except ValidationError:
            return  # the params model of the method refuses it with the full message
        if guard.thread_id is None:
            return
        current = self.mode(guard.thread_id)
        fingerprint = mode_fingerprint(current)
        if guard.mode_fingerprint == fingerprint or (
                guard.mode_fingerprint is None and fingerprint == DEFAULT_FINGERPRINT):
            return
        raise TetherError(
            ErrorCode.MODE_CHANGED,
            f"this thread is in mode {current.name}, not the mode this input was checked "
            "against; nothing was typed. Check it again under the current mode.",
            {"mode": current.name, "input_sent": False},
        )

    def mode(self, thread_id: str) -> ModeSpec:
        stored = self._catalog.get_thread_mode(thread_id)
        return DEFAULT_MODE if stored is None else ModeSpec.model_validate(stored)

    def _answer(self, params: Scoped) -> ThreadModeResult:
        thread = self._scope.thread_for(params)
        mode = self.mode(params.thread_id)
        return ThreadModeResult.model_validate({
            "mode": mode.model_dump(mode="json"), "fingerprint": mode_fingerprint(mode),
            "cwd": self._threads.cwd(params.thread_id, thread["cwd"])})
