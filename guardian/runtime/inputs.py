"""Input delivery: typing bytes into a terminal, and ``exec.input`` (text or keys).

:func:`deliver` is the only writer of user bytes into a PTY; starting a command uses it too,
so a slow or gone terminal is reported the same way whatever was being typed.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from tether.guardian.runtime import kernel
from tether.guardian.runtime.live import LiveExecution, LiveTable
from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.threads import Threads
from tether.guardian.terminal.keys import keys_bytes
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_CANONICAL_LINE_BYTES, MAX_TEXT_BYTES, long_line
from tether.protocol.methods import ExecInputParams


async def deliver(live: LiveExecution, data: bytes, timeout_s: float) -> None:
    """Write ``data`` to the execution's terminal within ``timeout_s`` (at least 0.1 s)."""
    try:
        await live.runtime.write(data, timeout_s=max(timeout_s, 0.1))
    except TimeoutError as exc:
        raise incomplete(getattr(exc, "written", 0), len(data)) from None
    except OSError as exc:
        raise TetherError(
            ErrorCode.NOT_RUNNING, f"the terminal is gone: {exc}", {"input_sent": False}
        ) from None


def incomplete(written: int, total: int) -> TetherError:
    """The terminal stopped taking input before the deadline: its program is not reading."""
    return TetherError(
        ErrorCode.INPUT_INCOMPLETE,
        f"the terminal took only {written} of {total} bytes before the deadline (its program "
        "is not reading input); the rest was not sent. Look at its screen before typing again.",
        {"input_sent": "partial" if written else False, "bytes_written": written,
         "bytes_total": total},
    )


_PROBE_CHARS = 12


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _probe(text: str | None) -> str | None:
    """The tail of the last line of ``text``: what its echo should show on the screen."""
    if text is None:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][-_PROBE_CHARS:] if lines else None


def _count(screen: str, text: str | None) -> int:
    probe = _probe(text)
    return screen.count(probe) if probe else 0


#: Terminal modes in which the program reads whole lines (``ICANON`` on).
_LINE_MODES = frozenset({"cooked", "cooked_no_echo"})


def refuse_long_line(text: str, mode: str | None) -> None:
    """``limit_exceeded`` (nothing typed) when the program reads whole lines (``mode``, from
    ``PtyRuntime.input_mode``) and a line of ``text`` is longer than the terminal's line buffer
    holds (MAX_CANONICAL_LINE_BYTES): the kernel would drop the rest of that line silently.
    Every line counts, the last one too (Enter may come with this text or later). Used by
    ``send_text`` and by prompts (agents/receipts)."""
    if mode not in _LINE_MODES:
        return  # raw mode: keys are read as they come
    found = long_line(text)
    if found is not None:
        number, size = found
        raise TetherError(
            ErrorCode.LIMIT_EXCEEDED,
            f"line {number} of the text is {size} bytes in UTF-8, and the program reads "
            f"whole lines (terminal in {mode} mode), which hold at most "
            f"{MAX_CANONICAL_LINE_BYTES} bytes: the terminal would silently drop the rest "
            "of the line. Nothing was typed. Write the text to a file and have the program "
            "read the file, or send lines shorter than that.",
            {"input_sent": False, "limit": MAX_CANONICAL_LINE_BYTES, "size": size,
             "line": number, "terminal_mode": mode},
        )


def stale_generation(asked: int, current: int) -> TetherError:
    return TetherError(
        ErrorCode.STALE_GENERATION,
        f"input names generation {asked} but the runtime is at generation {current}; "
        "nothing was delivered. Look at the execution again before sending.",
        {"input_sent": False, "generation": current},
    )


def _reads(live: LiveExecution) -> list[Any] | None:
    """``kernel.foreground_reads`` of the execution's terminal, JSON-safe (the baseline may be
    kept with the request's outcome)."""
    fd = live.runtime.fd
    found = kernel.foreground_reads(fd) if fd is not None else None
    return None if found is None else [found[0], list(found[1]), found[2]]


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
                    f"text is {len(data)} bytes in UTF-8; the limit is {MAX_TEXT_BYTES} bytes. "
                    "Nothing was typed. Write long text to a file and have the program read "
                    "it, or send it in parts.",
                    {"input_sent": False, "limit": MAX_TEXT_BYTES, "size": len(data)},
                )
            if params.submit:
                data += b"\r"
        else:
            data = keys_bytes(params.keys or [])
        live, generation = self._target(params)
        if params.generation is not None and params.generation != generation:
            raise stale_generation(params.generation, generation)
        if any(key in data for key in live.runtime.signal_keys()):
            # A Ctrl-c is for the job, not its leader: the wait counts against the write's.
            loop = asyncio.get_running_loop()
            began = loop.time()
            await live.runtime.job_in_front(write_timeout_s)
            write_timeout_s -= loop.time() - began
        before = (await live.screen.snapshot_async()).text  # a backlog is drawn off the loop
        mode = live.runtime.input_mode()
        signals = live.runtime.signal_keys()
        if params.text is not None:
            refuse_long_line(params.text, mode)  # before any byte is typed
        # What the programs in front had read before these bytes: the evidence observe needs
        # to call them discarded (nobody read a byte since, and the queue is empty).
        reads = _reads(live) if mode in _LINE_MODES else None
        await deliver(live, data, write_timeout_s)
        return {"execution_id": live.execution_id, "input_sent": True, "bytes": len(data),
                "terminal_mode": mode, "reads_keys": mode == "raw" if mode else None,
                "_baseline": {"screen_sha256": _digest(before),
                              "line_complete": data.endswith((b"\r", b"\n")),
                              # Ctrl-c and its kind: the terminal signals, nothing is queued.
                              "signals": bool(signals) and all(b in signals for b in data),
                              "probe": _probe(params.text), "probe_count": _count(before, params.text),
                              "reads": reads}}

    async def observe(self, outcome: dict[str, Any]) -> dict[str, Any]:
        """What was seen after a delivery: did the screen change, did the text echo, and how
        the program had the terminal set (before and after).

        ``delivery``: ``observed`` (the screen changed), ``unconfirmed`` (nothing changed yet),
        ``program_exited`` (it ended before the screen could be compared),
        ``line_buffered`` (line mode, no Enter yet), ``unread`` (waiting in the terminal's
        queue), ``discarded_likely`` (typed in line mode, the program switched to raw mode
        since, nothing waits and nobody in front has read a byte since: flushed, never a silent
        success) or ``unknown`` (typed in line mode, the program switched to raw mode and has
        read since: a line editor such as readline keeps what waits, a full-screen program's
        switch flushes it; which happened cannot be told, and sending again may run it twice).
        """
        baseline = outcome.get("_baseline") or {}
        result = {k: v for k, v in outcome.items() if k != "_baseline"}
        live = self._live.get(str(outcome.get("execution_id")))
        if not baseline:
            return result
        if live is None:
            result["delivery"] = "program_exited"  # it ended while the input settled
            return result
        after = (await live.screen.snapshot_async()).text
        probe = baseline.get("probe")
        changed = _digest(after) != baseline.get("screen_sha256")
        echo = None if probe is None else after.count(probe) > int(baseline.get("probe_count", 0))
        mode_after = live.runtime.input_mode()
        result.update(screen_changed=changed, echo_seen=echo, terminal_mode_after=mode_after)
        mode = result.get("terminal_mode")
        if mode is None:
            result["delivery"] = "unconfirmed"
        elif baseline.get("signals"):
            result["delivery"] = "signal"  # sent to the program in front; it may ignore it
        elif mode != "raw" and mode_after == "raw":
            # Typed in line mode, then the program switched to raw mode: a switch with
            # TCSAFLUSH (or a tcflush) discards what was waiting, readline's (TCSADRAIN) keeps
            # it for the program to read. Only "nobody has read anything since" tells them apart.
            unread = live.runtime.unread_input()
            reads = baseline.get("reads")
            now = _reads(live)
            if unread:
                result["delivery"] = "unread"
                result["warning"] = (
                    f"the program switched the terminal to raw mode and has not read this input "
                    f"yet ({unread} bytes wait in the terminal's input queue); it may read it "
                    "later.")
            elif reads is not None and now is not None and list(now) == list(reads):
                result["delivery"] = "discarded_likely"
                result["warning"] = (
                    f"the program had the terminal in {mode} mode when the input arrived and "
                    "switched to raw mode since; nothing waits in the terminal and nobody in "
                    "front has read a byte since, so the switch discarded it. Look at the "
                    "screen and send again if it did not react.")
            else:
                result["delivery"] = "unknown"
                result["warning"] = (
                    f"the program had the terminal in {mode} mode when the input arrived and "
                    "switched to raw mode since, and it has read since: a line editor (readline) "
                    "reads what waited, a full-screen program's switch discards it, and which "
                    "happened here cannot be told. Look at its screen or output before sending "
                    "again: sending again may run it twice.")
        elif mode != "raw" and (unread := live.runtime.unread_input()):
            # A whole line typed to a program that has not read it (sleep, a busy build):
            # it waits in the terminal's queue, and in the main shell the shell reads it as
            # a command line of its own if the command ends first.
            result["delivery"] = "unread"
            result["warning"] = (
                f"no program has read this input yet ({unread} bytes wait in the terminal's "
                "input queue): the program may read it later; if the command ends first, its "
                "shell reads it as a command line of its own.")
        elif mode != "raw" and not baseline.get("line_complete"):
            result["delivery"] = "line_buffered"
            result["warning"] = (
                f"the terminal is in {mode} mode: the program reads whole lines, so these bytes "
                "wait for Enter (a full-screen program that has not started reading keys yet "
                "may discard them when it does).")
        else:
            result["delivery"] = "observed" if changed else "unconfirmed"
        return result

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
