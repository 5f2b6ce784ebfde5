"""Thread modes (docs/security.md#profiles-and-modes): the guardian keeps each thread's mode so it outlives
front-ends.

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
from tether.shared.store.catalog import Catalog

#: The mode of a thread whose mode was never changed.
DEFAULT_MODE = ModeSpec()
DEFAULT_FINGERPRINT = mode_fingerprint(DEFAULT_MODE)


class ThreadModes:
    """``thread.mode`` and ``thread.set_mode``, and the mode guard of input-bearing requests."""

    def __init__(self, *, scope: Scope, catalog: Catalog, threads: Threads) -> None:
        self._scope = scope
        self._catalog = catalog
        self._threads = threads
        # thread id -> (mode, fingerprint). Only this guardian writes a thread's mode (it
        # holds the catalog), so the cache changes exactly when set_mode does: the guard of
        # every input-bearing request then costs no catalog read and no digest.
        self._known: dict[str, tuple[ModeSpec, str]] = {}

    def handlers(self) -> dict[str, Any]:
        return {"thread.mode": self.get_mode, "thread.set_mode": self.set_mode}

    async def get_mode(self, request: Request, params: ThreadModeParams) -> ThreadModeResult:
        return self._answer(params)

    async def set_mode(self, request: Request, params: ThreadSetModeParams) -> ThreadModeResult:
        """Store the mode. A change gives the thread a fresh main shell (``mode_sandbox``):
        nothing the old shell holds (functions, aliases, variables, traps) carries into a
        restricted mode, and an architect shell starts inside the sandbox (or leaves it)."""
        thread = self._scope.thread_for(params)
        changed = self._mode(params.thread_id)[1] != mode_fingerprint(params.mode)
        threads = self._threads
        if changed and threads.mode_sandbox:
            threads.refuse_if_busy(params.thread_id, "a mode change")
        self._known.pop(params.thread_id, None)
        self._catalog.set_thread_mode(params.thread_id, params.mode.model_dump(mode="json"))
        fresh: dict[str, Any] = {}
        shell = threads.shell(params.thread_id)
        if changed and threads.mode_sandbox and shell is not None and shell.alive:
            # Checked and stored with no await between: any input from here on is checked
            # against the new mode, and lands in the new shell.
            replaced = await threads.replace_shell(thread)
            fresh = {"generation": replaced["generation"], "orphans": replaced["orphans"]}
        return self._answer(params, **fresh)

    def guard(self, request: Request) -> None:
        """Refuse an input-bearing request checked against a mode the thread no longer has."""
        if request.method not in MODE_GUARDED:
            return
        sent, thread_id = request.params.get("mode_fingerprint"), request.params.get("thread_id")
        known = self._known.get(thread_id) if isinstance(thread_id, str) else None
        if known is not None and _fits(sent, known[1]):
            return  # the mode it was checked against is the thread's (the common case)
        try:
            guard = ModeGuard.model_validate(request.params)
        except ValidationError:
            return  # the params model of the method refuses it with the full message
        if guard.thread_id is None:
            return
        current, fingerprint = self._mode(guard.thread_id)
        if _fits(guard.mode_fingerprint, fingerprint):
            return
        raise TetherError(
            ErrorCode.MODE_CHANGED,
            f"this thread is in mode {current.name}, not the mode this input was checked "
            "against; nothing was typed. Check it again under the current mode.",
            {"mode": current.name, "input_sent": False},
        )

    def current(self, thread_id: str) -> ModeSpec:
        """The thread's mode now (what EditFiles is checked against, in the guardian)."""
        return self._mode(thread_id)[0]

    def _mode(self, thread_id: str) -> tuple[ModeSpec, str]:
        """The thread's mode and its fingerprint (cached once the thread is known)."""
        known = self._known.get(thread_id)
        if known is not None:
            return known
        stored = self._catalog.get_thread_mode(thread_id)
        if stored is None:
            mode, fingerprint = DEFAULT_MODE, DEFAULT_FINGERPRINT
        else:
            mode = ModeSpec.model_validate(stored)
            fingerprint = mode_fingerprint(mode)
        if stored is not None or self._catalog.get_thread(thread_id) is not None:
            self._known[thread_id] = (mode, fingerprint)  # never an unknown thread's id
        return mode, fingerprint

    def _answer(self, params: Scoped, **fresh: Any) -> ThreadModeResult:
        thread = self._scope.thread_for(params)
        mode, fingerprint = self._mode(params.thread_id)
        threads = self._threads
        sandbox: dict[str, Any] = {}
        if threads.mode_sandbox and mode.name == "architect":
            running = threads.shell_sandboxed(params.thread_id)
            if running is False and threads.sandbox is not None:
                missing = ("the running shell started before the sandbox was in place (an "
                           "older guardian's); reset_shell starts it sandboxed")
                sandbox = {"sandbox": None, "sandbox_missing": missing}
            else:
                sandbox = {"sandbox": threads.sandbox, "sandbox_missing": threads.sandbox_missing}
        return ThreadModeResult.model_validate({
            "mode": mode.model_dump(mode="json"), "fingerprint": fingerprint,
            "cwd": threads.cwd(params.thread_id, thread["cwd"]), **sandbox, **fresh})


def _fits(sent: object, fingerprint: str) -> bool:
    """Was input checked against this mode (no fingerprint sent: the default mode)?"""
    return sent == fingerprint or (sent is None and fingerprint == DEFAULT_FINGERPRINT)
