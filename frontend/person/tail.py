"""``tether tail ID [-f] [--bytes N]``: retained output, then (``-f``) live output until the
execution ends.

Bytes come from the journal by absolute offset (``exec.stream``), so nothing is printed twice
and nothing is skipped silently: bytes that retention dropped before they could be printed
are a marked line. On a terminal the raw bytes are written as they are (colours, cursor
moves); into a pipe they become plain text (CRLF to LF, escape sequences removed).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from tether.frontend.person.connect import (
    FOLLOW_WAIT_MS,
    Found,
    find_execution,
    guardians,
    run_cli,
    watched,
    workspace_arg,
)
from tether.frontend.person.offline import OnDisk
from tether.frontend.person.term import Progress, visible
from tether.protocol.limits import MAX_STREAM_BYTES, RPC_SLACK_S
from tether.protocol.method_table import EXEC_STREAM
from tether.protocol.results import StreamResult
from tether.shared.config import Config

_ESCAPES = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    rb"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    rb"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC
    rb"|\x1b[()*+][0-9A-Za-z]"  # charset designation
    rb"|\x1b[@-OQ-WYZ\\=>78c]"  # two-byte sequences (not the openers of the ones above)
)
#: An escape sequence that may be unfinished at the end of a chunk.
_TAIL_ESCAPE = re.compile(rb"\x1b[^\x07]{0,256}\Z")


class PlainText:
    """Raw terminal bytes to plain text, chunk by chunk (sequences may straddle chunks)."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        data = self._carry + data
        self._carry = b""
        cleaned = _ESCAPES.sub(b"", data)
        unfinished = _TAIL_ESCAPE.search(cleaned)
        if unfinished is not None:
            cleaned, self._carry = cleaned[: unfinished.start()], cleaned[unfinished.start():]
        if cleaned.endswith(b"\r"):
            cleaned, self._carry = cleaned[:-1], b"\r" + self._carry
        return cleaned.replace(b"\r\n", b"\n")

    def flush(self) -> bytes:
        rest, self._carry = self._carry, b""
        return rest.replace(b"\r\n", b"\n")


class Output:
    """Writes stream bytes to stdout, with gap markers on their own lines."""

    def __init__(self, fd: int, plain: bool) -> None:
        self.fd = fd
        self.plain = PlainText() if plain else None
        self.last = b"\n"

    def write(self, data: bytes) -> None:
        if self.plain is not None:
            data = self.plain.feed(data)
        if data:
            _write_all(self.fd, data)
            self.last = data[-1:]

    def gap(self, dropped: int) -> None:
        if self.plain is not None:
            # What waited for bytes that the gap dropped: a line's CR is the line's end; an
            # escape sequence will never be finished.
            rest = self.plain.flush().split(b"\x1b", 1)[0]
            if rest:
                self.write_raw(b"\n" if rest == b"\r" else rest)
        prefix = b"" if self.last in (b"\n", b"") else (b"\r\n" if self.plain is None else b"\n")
        newline = b"\n" if self.plain is not None else b"\r\n"
        self.write_raw(prefix + f"[tether: {dropped} bytes of output were dropped by retention "
                       "here (each execution keeps its first 64 KiB and last 1 MiB)]".encode() + newline)

    def write_raw(self, data: bytes) -> None:
        _write_all(self.fd, data)
        self.last = data[-1:]

    def close(self) -> None:
        if self.plain is not None:
            rest = self.plain.flush()
            if rest:
                _write_all(self.fd, rest)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


async def tail(entry: Found | OnDisk, execution_id: str, *, follow: bool,
               last_bytes: int | None, out: Output) -> StreamResult:
    """Print the retained output (the last ``last_bytes`` of it), then follow; returns the
    final stream figures."""
    offset = 0  # from the very first byte: what retention dropped is reported as a gap
    if last_bytes is not None:
        head = await entry.call(EXEC_STREAM, {"execution_id": execution_id, "max_bytes": 1})
        offset = max(0, head.journal_end - last_bytes)
    while True:
        wait = FOLLOW_WAIT_MS if follow else 0
        got = await entry.call(EXEC_STREAM, {
            "execution_id": execution_id, "offset": offset, "max_bytes": MAX_STREAM_BYTES,
            "timeout_ms": wait, "min_bytes": 64 * 1024, "linger_ms": 10},
            timeout_s=wait / 1000 + RPC_SLACK_S)
        if got.gap:
            out.gap(got.gap)
        if got.data:
            out.write(got.data)
        offset = got.end
        caught_up = offset >= got.journal_end
        if caught_up and (not follow or got.status != "running"):
            return got


def main(argv: list[str] | None = None) -> int:
    from tether.frontend.person.hosts import on_host

    # --host H: the same command, run on H over SSH (docs/hosts.md#a-fleet-seen-as-one).
    if (remote := on_host("tail", sys.argv[2:] if argv is None else argv)) is not None:
        return remote
    parser = argparse.ArgumentParser(
        prog="tether tail",
        description="Print an execution's retained output; with -f, keep printing until it "
        "ends. Output dropped by retention is a marked line. Into a pipe the text is plain "
        "(no escape sequences, LF line ends).")
    parser.add_argument("--host", help="run this on that host over SSH ([user@]host[:port], "
                        "as your ssh configuration knows it)")
    parser.add_argument("execution_id", metavar="ID")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="keep printing new output until the execution ends")
    parser.add_argument("--bytes", type=int, metavar="N", help="start N bytes before the end")
    parser.add_argument("--workspace", type=workspace_arg, help="look only in this workspace's guardian")
    args = parser.parse_args(argv)
    if args.bytes is not None and args.bytes < 0:
        parser.error("--bytes must be 0 or more")

    async def body() -> int:
        out = Output(sys.stdout.fileno(), plain=not os.isatty(sys.stdout.fileno()))
        sys.stdout.flush()
        config = Config.from_env()
        async with guardians(config, args.workspace) as found:
            with Progress(f"looking for {args.execution_id}"):
                entry, described = await find_execution(
                    found, args.execution_id, config=config, workspace=args.workspace)
            args.execution_id = described.execution.execution_id  # a prefix, whole
            try:
                final = await watched(entry, tail(entry, args.execution_id, follow=args.follow,
                                                  last_bytes=args.bytes, out=out))
            finally:
                out.close()
        if args.follow:
            code = final.exit_code
            print(visible(f"[tether: {args.execution_id} {final.status}"
                          + (f", exit code {code}" if code is not None else "")
                          + (f" ({final.reason})" if final.reason else "") + "]"),
                  file=sys.stderr)
        return 0

    return run_cli("tether tail", body)
