"""Input delivery: typing bytes into a terminal, and ``exec.input`` (text or keys).

:func:`deliver` is the only writer of user bytes into a PTY; starting a command uses it too,
so a slow or gone terminal is reported the same way whatever was being typed.
"""

from __future__ import annotations

from typing import Any

from tether.guardian.runtime.live import LiveExecution, LiveTable
from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.threads import Threads
from tether.guardian.terminal.keys import keys_bytes
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_TEXT_BYTES
from tether.protocol.methods import ExecInputParams


async def deliver(live: LiveExecution, data: bytes, timeout_s: float) -> None:
    """Write ``data`` to the execution's terminal within ``timeout_s`` (at least 0.1 s)."""
    try:
        await live.runtime.write(data, timeout_s=max(timeout_s, 0.1))
    except TimeoutError as exc:
        written = getattr(exc, "written", 0)
        raise TetherError(
            ErrorCode.GUARDIAN_UNAVAILABLE,
            f"the terminal took only {written} of {len(data)} bytes before the deadline",
            {"input_sent": "partial" if written else False},
        ) from None
    except OSError as exc:
        raise TetherError(
            ErrorCode.NOT_RUNNING, f"the terminal is gone: {exc}", {"input_sent": False}
        ) from None


def stale_generation(asked: int, current: int) -> TetherError:
    return TetherError(
        ErrorCode.STALE_GENERATION,
        f"input names generation {asked} but the runtime is at generation {current}; "
        "nothing was delivered. Look at the execution again before sending.",
        {"input_sent": False, "generation": current},
    )


class InputDesk:
    """``exec.input``: text or keys into an execution's terminal (or the main shell's)."""

    def __init__(self, *, scope: Scope, live: LiveTable, threads: Threads) -> None:
        self._scope = scope
        self._live = live
        self._threads = threads

    async def send(self, params: ExecInputParams, *, write_timeout_s: float) -> dict[str, Any]:
        """Type text or keys into an execution's terminal (or the main shell's)."""
        if (params.text is None) == (params.keys is None):
            raise TetherError(
                ErrorCode.INVALID_REQUEST, "give exactly one of text or keys", {"input_sent": False}
            )
        if params.text is not None:
            data = params.text.encode()
            if len(data) > MAX_TEXT_BYTES:
                raise TetherError(
                    ErrorCode.LIMIT_EXCEEDED,
                    f"text is {len(data)} bytes; the limit is {MAX_TEXT_BYTES}",
                    {"input_sent": False},
                )
            if params.submit:
                data += b"\r"
        else:
            data = keys_bytes(params.keys or [])
        live, generation = self._target(params)
        if params.generation is not None and params.generation != generation:
            raise stale_generation(params.generation, generation)
        await deliver(live, data, write_timeout_s)
        return {"execution_id": live.execution_id, "input_sent": True, "bytes": len(data)}

    def _target(self, params: ExecInputParams) -> tuple[LiveExecution, int]:
        if params.execution_id is not None:
            record = self._scope.record_for(params, params.execution_id)
            live = self._live.get(params.execution_id)
            if live is None:
                raise TetherError(
                    ErrorCode.NOT_RUNNING,
                    f"execution {params.execution_id} is {record['status']}; nothing was typed",
                    {"input_sent": False, "status": record["status"]},
                )
            return live, live.generation
        thread = self._scope.thread_for(params)
        shell = self._threads.shell(thread["thread_id"])
        if shell is None or shell.current is None:
            raise TetherError(
                ErrorCode.NOT_RUNNING,
                "no command is running in the main shell; name an execution_id, or start a "
                "command first",
                {"input_sent": False},
            )
        return shell.current, shell.generation
