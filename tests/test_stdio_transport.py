"""``tether serve``'s stdio transport on each kind of stdin/stdout: pipes and sockets are
driven from the event loop without changing the flags of a description the parent shares,
anything else (a regular file) goes through worker threads; replies that do not fit the pipe
wait in order and arrive whole."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from mcp.shared.message import SessionMessage

from tests.helpers import poll
from tests.mcp_helpers import (
    INITIALIZE,
    INITIALIZED,
    Lines,
    json_line,
    serve_on_pipes,
    spawn_serve,
    stop_serve,
)
from tether.frontend.transport import stdio
from tether.shared.config import Config

LOOP = "stdio on the event loop"
F_GETPIPE_SZ = 1032
PIPE_BYTES = 65536
THREADS = "stdio in worker threads"


def _ping(rid: int) -> bytes:
    return json_line({"jsonrpc": "2.0", "id": rid, "method": "ping"})


def _nonblocking(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK)


@pytest.fixture
def stderr_log(tmp_path: Path) -> Iterator[tuple[Path, IO[bytes]]]:
    path = tmp_path / "serve.log"
    with path.open("wb") as fh:
        yield path, fh


def test_pipes_run_on_the_loop_without_touching_shared_descriptions(
    tether_env: Config, stderr_log: tuple[Path, IO[bytes]]
) -> None:
    log_path, log = stderr_log
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    # The parent keeps the very descriptions the child serves on (as a shell passing its
    # own stdin and stdout through would): their flags must not change under it.
    proc = spawn_serve(in_r, out_w, log)
    try:
        os.write(in_w, json_line(INITIALIZE) + json_line(INITIALIZED) + _ping(1))
        replies = Lines(lambda n: os.read(out_r, n))
        assert "result" in replies.next()
        assert replies.next() == {"jsonrpc": "2.0", "id": 1, "result": {}}
        assert not _nonblocking(in_r) and not _nonblocking(out_w)
    finally:
        for fd in (in_w, in_r, out_w):
            os.close(fd)
        status = stop_serve(proc)
        os.close(out_r)
    assert status == 0  # end of stdin ends the session
    assert LOOP in log_path.read_text()


def test_a_socketpair_runs_on_the_loop_with_its_flags_unchanged(
    tether_env: Config, stderr_log: tuple[Path, IO[bytes]]
) -> None:
    log_path, log = stderr_log
    ours, theirs = socket.socketpair()  # how libuv (Node clients) hands out stdio
    proc = spawn_serve(theirs.fileno(), theirs.fileno(), log)
    try:
        ours.sendall(json_line(INITIALIZE) + json_line(INITIALIZED) + _ping(7))
        replies = Lines(ours.recv)
        assert "result" in replies.next()
        assert replies.next()["id"] == 7
        assert not _nonblocking(theirs.fileno())
        ours.shutdown(socket.SHUT_WR)
        assert stop_serve(proc) == 0
    finally:
        theirs.close()
        ours.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert LOOP in log_path.read_text()


def test_a_regular_file_goes_through_worker_threads(
    tether_env: Config, stderr_log: tuple[Path, IO[bytes]], tmp_path: Path
) -> None:
    log_path, log = stderr_log
    out_path = tmp_path / "replies.jsonl"
    in_r, in_w = os.pipe()
    with out_path.open("wb") as out:
        proc = spawn_serve(in_r, out, log)
    os.close(in_r)
    try:
        os.write(in_w, json_line(INITIALIZE) + json_line(INITIALIZED) + _ping(3) + b"{oops\n")

        def replied() -> list[dict[str, Any]] | None:
            lines = out_path.read_bytes().splitlines()
            return [json.loads(line) for line in lines] if len(lines) >= 3 else None

        replies = poll(replied, what="three replies in the output file")
    finally:
        os.close(in_w)
        status = stop_serve(proc)
    assert status == 0
    assert {"jsonrpc": "2.0", "id": 3, "result": {}} in replies
    assert any(r.get("error", {}).get("code") == -32700 for r in replies)
    assert THREADS in log_path.read_text()


def test_replies_that_do_not_fit_the_pipe_wait_in_order(
    tether_env: Config, stderr_log: tuple[Path, IO[bytes]]
) -> None:
    log_path, log = stderr_log
    proc, stdin, stdout, replies = serve_on_pipes(log)
    assert fcntl.fcntl(stdout.fileno(), F_GETPIPE_SZ) == PIPE_BYTES
    # Each reply echoes a 100 KB id, more than the pipe holds: every one is written in parts,
    # after queueing behind the one before it. Small pings in between must not overtake.
    big = [f"{n}-" + "x" * 100_000 for n in range(4)]
    requests = []
    for n, rid in enumerate(big):
        requests += [json_line({"jsonrpc": "2.0", "id": rid, "method": "ping"}), _ping(n)]

    def send_all() -> None:
        # Nothing is read meanwhile: the server's stdout fills up and its replies queue.
        stdin.write(b"".join(requests))
        stdin.flush()

    writer = threading.Thread(target=send_all)
    writer.start()
    try:
        writer.join(timeout=30)
        assert not writer.is_alive(), "tether serve stopped reading its stdin"
        ids = [replies.next()["id"] for _ in range(2 * len(big))]
    finally:
        stdin.close()
        status = stop_serve(proc)
    assert ids == [rid for n, big_id in enumerate(big) for rid in (big_id, n)]
    assert status == 0
    assert LOOP in log_path.read_text()


class _Chunks:
    """A reader that hands out fixed chunks, then the end of input."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    async def read(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""

    def close(self) -> None:
        pass


class _Collect:
    """A writer that keeps what it is given."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    async def write(self, data: bytes) -> None:
        self.lines.append(json.loads(data))

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


def _method(item: object) -> str:
    assert isinstance(item, SessionMessage)
    method: str = item.message.model_dump()["method"]
    return method


@pytest.mark.anyio
async def test_the_opening_request_is_peeked_then_received_after_what_came_before() -> None:
    writer = _Collect()
    inbound = stdio.Inbound(_Chunks(
        json_line(INITIALIZED)[:20], json_line(INITIALIZED)[20:] + b"{oops\n" + json_line(INITIALIZE)[:-1],
        b"\n" + _ping(5)), stdio.Outbound(writer))
    opening = await inbound.opening_request(keep=8)
    assert opening is not None and opening.method == "initialize"
    received = [item async for item in inbound]
    assert [_method(item) for item in received] == [
        "notifications/initialized", "initialize", "ping"]
    assert writer.lines[0]["error"]["code"] == -32700  # the bad line was answered, not queued


@pytest.mark.anyio
async def test_input_that_ends_before_a_request_has_no_opening_request() -> None:
    inbound = stdio.Inbound(_Chunks(json_line(INITIALIZED) * 3), stdio.Outbound(_Collect()))
    assert await inbound.opening_request(keep=2) is None
    assert len([item async for item in inbound]) == 2  # frames beyond the limit are dropped


def test_this_sdk_serves_without_the_relay_task() -> None:
    # When an SDK upgrade renames its serving loops, serve() quietly falls back to
    # Server.run (two more task switches per request): this says so.
    assert stdio._sdk_serving_loops() is not None


def test_a_client_that_stops_reading_replies_ends_the_session_cleanly(
    tether_env: Config, stderr_log: tuple[Path, IO[bytes]]
) -> None:
    log_path, log = stderr_log
    proc, stdin, stdout, _ = serve_on_pipes(log)
    stdout.close()  # replies now fail with EPIPE: the server must carry on reading
    stdin.write(b"".join(_ping(rid) for rid in range(1, 50)))
    stdin.close()
    assert stop_serve(proc) == 0  # the end of stdin still ends it, quietly
    text = log_path.read_text()
    assert LOOP in text and "the client is gone" in text and "Traceback" not in text
