"""The RPC round trip's fast paths: the depth check by header count, parts taken one by one
from the sockets, hello answered from what the guardian built for the same range."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from tether.frontend.guardians.locator import GuardianLocator
from tether.protocol import codec
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.transport import GuardianClient, RouterServer
from tether.protocol.versions import Version, known_minor_versions
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


def _nested(levels: int) -> Any:
    """``levels`` lists, one inside the other."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_depth_is_checked_whatever_the_header_count_says() -> None:
    limit = codec.DEFAULT_LIMITS.max_depth
    assert codec.decode(codec.encode(_nested(limit))) == _nested(limit)
    with pytest.raises(TetherError) as deep:
        codec.decode(codec.encode(_nested(limit + 1)))
    assert deep.value.code == ErrorCode.LIMIT_EXCEEDED
    # Shallow, but full of bytes that look like map and array headers (non-ASCII text, big
    # integers): the count cannot rule the walk out, and the walk lets it pass.
    shallow = {"text": "é" * 50 + "\u0480" * 50, "n": [0xDCDDDEDF, 2**63 + 0x9F9F]}
    assert codec.decode(codec.encode(shallow)) == shallow
    with pytest.raises(TetherError) as deep_and_noisy:
        codec.decode(codec.encode({"text": "é" * 50, "deep": _nested(limit)}))
    assert deep_and_noisy.value.code == ErrorCode.LIMIT_EXCEEDED


async def test_the_router_drops_a_multipart_request_and_answers_the_next(tmp_path: Path) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    endpoint = f"ipc://{tmp_path}/r.sock"

    async def echo(frame: bytes) -> bytes:
        return b"re:" + frame

    server = RouterServer(endpoint, echo, ctx)
    server.bind()
    serving = asyncio.ensure_future(server.serve())
    peer = ctx.socket(zmq.DEALER)
    peer.connect(endpoint)
    try:
        peer.send_multipart([b"one", b"two", b"three"])  # not a DEALER request of ours
        peer.send(b"four")
        assert await asyncio.wait_for(asyncio.to_thread(peer.recv), 5) == b"re:four"
        peer.send(b"five")
        assert await asyncio.wait_for(asyncio.to_thread(peer.recv), 5) == b"re:five"
    finally:
        peer.close(0)
        serving.cancel()
        server.close()
        ctx.term()


async def test_the_client_drops_a_multipart_reply_and_takes_the_next(tmp_path: Path) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    endpoint = f"ipc://{tmp_path}/g.sock"
    fake = ctx.socket(zmq.ROUTER)  # a peer that answers with extra parts, then properly
    fake.bind(endpoint)
    client = GuardianClient(endpoint, "x" * 64, version=Version(1, 0), context=ctx)

    def answer() -> None:
        ident, frame = fake.recv_multipart()
        rid = msgpack.unpackb(frame)["id"]
        reply = codec.encode({"v": [1, 0], "id": rid, "ok": True, "result": {"n": 1}})
        fake.send_multipart([ident, reply, b"extra"])
        fake.send_multipart([ident, codec.encode(
            {"v": [1, 0], "id": rid, "ok": True, "result": {"n": 2}})])

    try:
        call = asyncio.ensure_future(client.call("hello", {}, timeout_s=5))
        await asyncio.to_thread(answer)
        assert await call == {"n": 2}
    finally:
        client.close()
        fake.close(0)
        ctx.term()


async def test_a_reply_over_the_limits_fails_its_call_at_once(tmp_path: Path) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    endpoint = f"ipc://{tmp_path}/big.sock"
    fake = ctx.socket(zmq.ROUTER)  # an (older) guardian that sends what this client refuses
    fake.bind(endpoint)
    client = GuardianClient(endpoint, "x" * 64, version=Version(1, 0), context=ctx)
    too_big = codec.DEFAULT_LIMITS.max_frame_bytes

    def answer() -> None:
        ident, frame = fake.recv_multipart()
        rid = msgpack.unpackb(frame)["id"]
        fake.send_multipart([ident, codec.encode(
            {"v": [1, 0], "id": rid, "ok": True, "result": {"s": "x" * too_big}})])

    try:
        call = asyncio.ensure_future(client.call("exec.list", {}, timeout_s=30))
        await asyncio.to_thread(answer)
        with pytest.raises(TetherError) as failed:
            await asyncio.wait_for(call, 5)  # not at its 30 s deadline
        assert failed.value.code == ErrorCode.LIMIT_EXCEEDED
        assert "reply could not be read" in failed.value.message
        assert failed.value.data["input_sent"] == "unknown"
    finally:
        client.close()
        fake.close(0)
        ctx.term()


async def test_hello_answers_each_client_range_with_its_own_version(
        tether_env: Config, workspace: Path) -> None:
    locator = GuardianLocator(tether_env)
    try:
        handle = await locator.handle(str(workspace))
        call = handle.client.call
        for _ in range(2):  # the second round is answered from what the first built
            old = await call("hello", {"client_min": [1, 0], "client_max": [1, 0]}, timeout_s=5)
            new = await call("hello", {"client_min": [1, 0], "client_max": [1, 99]}, timeout_s=5)
            assert old["version"] == [1, 0]
            assert Version(*new["version"]) == max(known_minor_versions())
            assert new["instance_id"] == old["instance_id"] and new["identity"]["pid"] != os.getpid()
        with pytest.raises(TetherError) as refused:
            await call("hello", {"client_min": [2, 0], "client_max": [2, 1]}, timeout_s=5)
        assert refused.value.code == ErrorCode.PROTOCOL_MISMATCH
    finally:
        locator.close()
