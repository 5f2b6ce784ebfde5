"""Hostile bytes at a real guardian's socket (issue 7, docs/protocol.md#envelope): it answers or drops each
frame,
keeps serving, and its memory stays bounded."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import msgpack
import psutil
import zmq

from tests.helpers import start_guardian
from tether.protocol import codec
from tether.shared.config import Config

FRAMES = 10_000


def _valid(info: dict[str, Any], workspace: Path, rng: random.Random) -> dict[str, Any]:
    method = rng.choice(["hello", "exec.list", "exec.start", "exec.read", "thread.open"])
    return {
        "v": [1, rng.choice([0, 1, 2, 9])], "id": f"f{rng.randrange(10**9)}", "method": method,
        "params": {"principal": "local", "workspace_root": str(workspace), "thread_id": "th_fuzz",
                   "command": "true", "idempotency_key": "k", "execution_id": "ex_x"},
        "deadline_unix_ms": int((time.time() + 30) * 1000),
        "guardian_instance_id": info["instance_id"], "auth": info["auth_token"],
    }


def _hostile(info: dict[str, Any], workspace: Path, rng: random.Random) -> bytes:
    kind = rng.randrange(9)
    valid = _valid(info, workspace, rng)
    frame = codec.encode(valid)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 300))  # random garbage
    if kind == 1:
        return frame[: rng.randrange(1, len(frame))]  # truncated
    if kind == 2:
        mutated = bytearray(frame)  # a few flipped bytes
        for _ in range(rng.randrange(1, 6)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        return bytes(mutated)
    if kind == 3:
        return codec.encode({**valid, "auth": "wrong"})  # unauthenticated
    if kind == 4:
        return codec.encode({**valid, "method": rng.choice([1, None, [], "no.such"]),
                             "params": rng.choice([[], 5, "x"])})  # wrong types
    if kind == 5:
        nested: Any = 1
        for _ in range(rng.randrange(17, 200)):
            nested = [nested]
        return codec.encode({**valid, "params": {"deep": nested}})  # deeply nested
    if kind == 6:
        packed: bytes = msgpack.packb({1: 2, b"k": "v"}, use_bin_type=True)  # int/bin map keys
        return packed
    if kind == 7:
        return b"\xdd\xff\xff\xff\xf0"  # claims a 4-billion-item array
    return codec.encode({**valid, "params": {**valid["params"], "unknown_key": rng.random()}})


def test_guardian_survives_hostile_frames(tether_env: Config, workspace: Path) -> None:
    info = start_guardian(workspace, tether_env, None)
    guardian = psutil.Process(info["pid"])
    rng = random.Random(20261130)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(info["endpoint"])
    try:
        replies = 0

        def drain() -> None:
            nonlocal replies
            while sock.poll(0):
                sock.recv()
                replies += 1

        def hello() -> dict[str, Any]:
            """A normal handshake; resent a few times, since the frame queued right after an
            oversized one is lost with the dropped connection (NOTES)."""
            nonlocal replies
            for attempt in range(5):
                rid = f"h{attempt}"
                sock.send(codec.encode(_valid(info, workspace, rng) | {
                    "method": "hello", "id": rid, "v": [1, 2], "params": {}}))
                deadline = time.monotonic() + 2
                while time.monotonic() < deadline:
                    if sock.poll(200):
                        reply: dict[str, Any] = codec.decode(sock.recv())
                        if reply.get("id") == rid:
                            return reply
                        replies += 1
            raise AssertionError("guardian stopped answering")

        assert hello()["ok"]
        rss_before = guardian.memory_info().rss
        for i in range(FRAMES):
            sock.send(_hostile(info, workspace, rng))
            if i % 200 == 0:
                drain()
        assert hello()["ok"]  # still serving after 10,000 hostile frames
        # One oversized frame: the guardian's MAXMSGSIZE drops it (and our connection, which
        # ZeroMQ re-establishes by itself).
        sock.send(b"\x00" * (5 * 1024 * 1024))
        reply = hello()
        assert reply["ok"] and reply["result"]["instance_id"] == info["instance_id"]
        assert replies > FRAMES // 3  # malformed frames got error replies, not silence
        assert guardian.is_running()
        grown = guardian.memory_info().rss - rss_before
        assert grown < 40 * 1024 * 1024, f"guardian RSS grew by {grown / 1e6:.1f} MB"
    finally:
        sock.close(0)
        ctx.term()
