"""Tether benchmarks (SPEC §11): each figure is printed next to a baseline measured in the
same run, as a ratio. Run with ./scripts/bench; nothing here is a pass/fail test."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from mcp import Client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tether.frontend.server import build_server  # noqa: E402
from tether.shared.config import Config  # noqa: E402


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def tmux_baseline(rounds: int) -> list[float]:
    """tmux send-keys + capture-pane polling until the echoed marker shows."""
    if shutil.which("tmux") is None:
        return []
    sock = f"tether-bench-{os.getpid()}"
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "40", "bash --norc -i"],
                   check=True, env={**os.environ, "HOME": tempfile.mkdtemp()})
    samples = []
    try:
        time.sleep(0.3)
        for i in range(rounds):
            marker = f"m{i}x{uuid.uuid4().hex[:6]}"
            start = time.perf_counter()
            subprocess.run([*tmux, "send-keys", f"echo {marker}", "Enter"], check=True)
            while True:
                pane = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True,
                                      text=True, check=True).stdout
                if pane.count(marker) >= 2:  # the typed line and its output
                    break
            samples.append(time.perf_counter() - start)
            subprocess.run([*tmux, "send-keys", "clear", "Enter"], check=True)
            time.sleep(0.02)
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    return samples


async def _session(client: Client, workspace: Path) -> dict[str, Any]:
    """Initialize a thread in ``workspace``; returns the result's data."""
    init = await client.call_tool("Initialize", {"workspace_root": str(workspace)})
    assert init.structured_content is not None
    data: dict[str, Any] = init.structured_content["data"]
    return data


async def _background(client: Client, scope: dict[str, Any], command: str) -> str:
    """Start ``command`` as a background execution; returns its execution_id."""
    started = await client.call_tool("BashCommand", {**scope, "action_json": {
        "type": "command", "is_background": True, "command": command}})
    assert started.structured_content is not None
    execution_id: str = started.structured_content["data"]["execution_id"]
    return execution_id


async def tether_echo(rounds: int, workspace: Path) -> list[float]:
    """BashCommand `echo hi` through the real MCP client (in-process front-end)."""
    samples = []
    async with Client(build_server(Config.from_env())) as client:
        session = await _session(client, workspace)
        args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
                "action_json": {"type": "command", "command": "echo hi"}}
        for _ in range(3):  # warm the shell and the connection
            await client.call_tool("BashCommand", args)
        for _ in range(rounds):
            start = time.perf_counter()
            result = await client.call_tool("BashCommand", args)
            samples.append(time.perf_counter() - start)
            assert result.structured_content and result.structured_content["data"]["exit_code"] == 0
    return samples


async def tether_observe(rounds: int, workspace: Path) -> list[float]:
    """Execution.observe of 32 busy background executions (each printing continuously)."""
    samples = []
    async with Client(build_server(Config.from_env())) as client:
        session = await _session(client, workspace)
        scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
        ids = []
        for _ in range(32):
            ids.append(await _background(
                client, scope, "while :; do echo busy $RANDOM; sleep 0.2; done"))
        items = [{"execution_id": i, "page_bytes": 2048} for i in ids]
        for _ in range(rounds):
            start = time.perf_counter()
            result = await client.call_tool("Execution", {**scope, "action": {
                "type": "observe", "items": items}})
            samples.append(time.perf_counter() - start)
            assert result.structured_content and result.structured_content["ok"]
        for i in ids:
            await client.call_tool("BashCommand", {**scope, "action_json": {
                "type": "send_keys", "keys": ["Ctrl-c"], "execution_id": i}, "wait_for_seconds": 0})
    return samples


ECHO_SERVER = """
import sys, msgpack, zmq
ctx = zmq.Context(); sock = ctx.socket(zmq.ROUTER); sock.bind(sys.argv[1])
print("ready", flush=True)
while True:
    ident, frame = sock.recv_multipart()
    msg = msgpack.unpackb(frame)
    sock.send_multipart([ident, msgpack.packb({"v": msg["v"], "id": msg["id"], "ok": True, "result": {}})])
"""


async def _roundtrips(call: Any, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


async def rpc_roundtrip(rounds: int, workspace: Path, base: Path) -> tuple[list[float], list[float]]:
    """``hello`` to the real guardian vs. a raw pyzmq ROUTER + msgpack echo in another process."""
    import msgpack
    import zmq
    import zmq.asyncio

    from tether.frontend.guardians import GuardianLocator

    locator = GuardianLocator(Config.from_env())
    handle = await locator.handle(str(workspace))
    hello = {"client_min": [1, 0], "client_max": [1, 9]}
    await handle.client.call("hello", hello, timeout_s=5)
    tether = await _roundtrips(lambda: handle.client.call("hello", hello, timeout_s=5), rounds)
    locator.close()

    endpoint = f"ipc://{base}/echo.sock"
    server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, endpoint], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None and server.stdout.readline().startswith(b"ready")
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.connect(endpoint)
        ids = iter(range(10**9))

        async def echo() -> None:
            await sock.send(msgpack.packb({"v": [1, 0], "id": str(next(ids)), "method": "hello",
                                           "params": hello, "auth": "x" * 64}))
            msgpack.unpackb(await sock.recv())

        await _roundtrips(echo, 50)
        raw = await _roundtrips(echo, rounds)
        sock.close(0)
        ctx.term()
    finally:
        server.kill()
        server.wait()
    return tether, raw


def raw_pty_rate(path: Path) -> float:
    """MB/s of reading ``cat FILE`` from a PTY as fast as possible (the ingest baseline)."""
    from ptyprocess import PtyProcess

    proc = PtyProcess.spawn(["cat", str(path)], dimensions=(40, 120))
    total = 0
    start = time.perf_counter()
    while True:
        try:
            data = os.read(proc.fd, 256 * 1024)
        except OSError:
            break
        if not data:
            break
        total += len(data)
    elapsed = time.perf_counter() - start
    proc.wait()
    return total / elapsed / 1e6


async def ingest(workspace: Path, path: Path) -> tuple[float, float, bool, int]:
    """``cat`` of a big file as a background execution: MB/s, then a screen request's latency."""
    size_on_pty = path.stat().st_size + path.read_bytes().count(b"\n")  # onlcr adds a CR per LF
    last_line = path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1].decode()
    async with Client(build_server(Config.from_env())) as client:
        session = await _session(client, workspace)
        scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
        # Ingest: a plain `cat`, waited for by its exit (one wait call, woken by the exit).
        start = time.perf_counter()
        eid = await _background(client, scope, f"cat {path}")
        while True:
            waited = await client.call_tool("Execution", {**scope, "action": {
                "type": "wait", "execution_ids": [eid], "events": ["exited"], "timeout_seconds": 30}})
            assert waited.structured_content is not None
            if waited.structured_content["data"]["outcome"] == "changed":
                break
        elapsed = time.perf_counter() - start
        # Screen: the same output from a program that stays alive, so the screen is live.
        eid = await _background(client, scope, f"cat {path}; sleep 60")
        while True:
            got = await client.call_tool("Execution", {**scope, "action": {
                "type": "get", "execution_id": eid}})
            assert got.structured_content is not None
            if got.structured_content["data"]["execution"]["output_end"] >= size_on_pty:
                break
            await asyncio.sleep(0.25)
        t0 = time.perf_counter()
        screen = await client.call_tool("BashCommand", {**scope, "action_json": {
            "type": "screen", "execution_id": eid}})
        screen_ms = (time.perf_counter() - t0) * 1000
        assert screen.structured_content is not None
        text = screen.structured_content["data"]["screen"]["text"]
        await client.call_tool("BashCommand", {**scope, "action_json": {
            "type": "send_keys", "keys": ["Ctrl-c"], "execution_id": eid}, "wait_for_seconds": 0})
    return path.stat().st_size / elapsed / 1e6, screen_ms, text.rstrip().endswith(last_line), len(text)


PACED_WRITER = """
import os, sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
line = b"x" * 99 + b"\\n"
chunk = line * 1000  # 100 kB
start = time.perf_counter(); sent = 0
while time.perf_counter() - start < seconds:
    os.write(1, chunk); sent += len(chunk)
    ahead = sent / rate - (time.perf_counter() - start)
    if ahead > 0:
        time.sleep(ahead)
"""


async def attach_throughput(workspace: Path, command: str) -> tuple[float, int, int]:
    """``tether attach`` in a PTY (the person's terminal, read as fast as a fast terminal
    would) while a background execution runs ``command``: bytes shown per second from the
    moment the program starts, the bytes, and how many repaints (falling behind retention)."""
    import threading

    from ptyprocess import PtyProcess

    go = workspace / f"go-{uuid.uuid4().hex[:8]}"
    async with Client(build_server(Config.from_env())) as client:
        session = await _session(client, workspace)
        scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
        eid = await _background(client, scope, f"while [ ! -e {go} ]; do sleep 0.01; done; "
                                               f"{command}")
        tether = str(Path(sys.executable).with_name("tether"))
        proc = PtyProcess.spawn([tether, "attach", eid], dimensions=(50, 120), env=dict(os.environ))
        received: list[tuple[float, int]] = []
        chunks: list[bytes] = []

        def read() -> None:
            while True:
                try:
                    data = os.read(proc.fd, 1 << 20)
                except OSError:
                    return
                if not data:
                    return
                received.append((time.perf_counter(), len(data)))
                chunks.append(data)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + 20
        while b"attached to" not in b"".join(chunks) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        painted = len(received)
        start = time.perf_counter()
        go.touch()
        reader.join(timeout=300)
        proc.wait()
    after = b"".join(chunks[painted:])
    farewell = after.rfind(b"[tether: ")
    shown = after[:farewell] if farewell >= 0 else after
    last = max((t for t, _ in received[painted:]), default=start)
    repaints = shown.count(b"tether: attached to")
    return len(shown) / max(last - start, 1e-9) / 1e6, len(shown), repaints


async def restart_to_first_call(workspace: Path, rounds: int = 5) -> tuple[list[float], list[float]]:
    """A fresh `tether serve` process (guardian alive) until its first successful call,
    against `python -c "import mcp"` as the baseline."""
    from mcp import StdioServerParameters

    params = StdioServerParameters(command=str(Path(sys.executable).with_name("tether")),
                                   args=["serve"], env=dict(os.environ))
    async with Client(params) as warm:  # make sure the guardian is up and the thread exists
        init = await warm.call_tool("Initialize", {"workspace_root": str(workspace)})
        assert init.structured_content is not None
        thread_id = init.structured_content["data"]["thread_id"]
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        async with Client(params) as client:
            result = await client.call_tool("Initialize", {"workspace_root": str(workspace),
                                                           "thread_id": thread_id})
            assert result.structured_content and result.structured_content["ok"]
            samples.append(time.perf_counter() - start)
    baseline = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import mcp"], check=True)
        baseline.append(time.perf_counter() - start)
    return samples, baseline


async def _echo_call(client: Client, workspace: Path) -> Any:
    """A warmed-up `echo hi` BashCommand on ``client``: returns a coroutine factory."""
    session = await _session(client, workspace)
    args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action_json": {"type": "command", "command": "echo hi"}}

    async def one() -> float:
        start = time.perf_counter()
        result = await client.call_tool("BashCommand", args)
        elapsed = time.perf_counter() - start
        assert result.structured_content and result.structured_content["data"]["exit_code"] == 0
        return elapsed

    for _ in range(3):  # warm the shell and the connection
        await one()
    return one


async def http_and_stdio_echo(rounds: int, workspace: Path, base: Path
                              ) -> tuple[list[float], list[float]]:
    """BashCommand `echo hi` through a real `tether serve --http` (SDK streamable HTTP client,
    bearer token) and, as its baseline, through `tether serve` over stdio: the two calls
    alternate, so that the load of a shared machine weighs on both alike."""
    import re
    import secrets

    import httpx2
    from mcp import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    tether = str(Path(sys.executable).with_name("tether"))
    token = secrets.token_urlsafe(32)
    principals = base / "principals.toml"
    principals.write_text(f'[[principal]]\nid = "bench"\ntoken = "{token}"\nprofile = "full"\n')
    principals.chmod(0o600)
    log = base / "serve-http.log"
    with log.open("wb") as err:
        server = subprocess.Popen([tether, "serve", "--http", "--port", "0", "--principals",
                                   str(principals)], stdin=subprocess.DEVNULL, stderr=err)
    over_http: list[float] = []
    over_stdio: list[float] = []
    try:
        deadline = time.monotonic() + 30
        while not (found := re.search(r"at (http://\S+/mcp)", log.read_text())):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tether serve --http did not start: {log.read_text()}")
            await asyncio.sleep(0.05)
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
        stdio = StdioServerParameters(command=tether, args=["serve"], env=dict(os.environ))
        async with Client(streamable_http_client(found.group(1), http_client=http)) as on_http, \
                Client(stdio) as on_stdio:
            http_echo = await _echo_call(on_http, workspace)
            stdio_echo = await _echo_call(on_stdio, workspace)
            for _ in range(rounds):
                over_http.append(await http_echo())
                over_stdio.append(await stdio_echo())
    finally:
        server.terminate()
        server.wait(timeout=10)
    return over_http, over_stdio


def stop_guardians(runtime_dir: Path) -> None:
    """SIGTERM the guardians this run started (found by their guardian.json, never by name):
    they hang up every terminal they hold, including the busy programs of the observe bench."""
    import json
    import signal

    for info_path in runtime_dir.glob("*/guardian.json"):
        try:
            os.kill(int(json.loads(info_path.read_text())["pid"]), signal.SIGTERM)
        except (OSError, ValueError, KeyError):
            continue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--ingest-mb", type=int, default=100, help="size of the cat benchmark file")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="tb-", dir="/tmp"))
    os.environ.update(TETHER_HOME=str(base / "state"), TETHER_RUNTIME_DIR=str(base / "run"),
                      TETHER_GUARDIAN_IDLE_S="30")
    home = base / "home"
    home.mkdir()
    os.environ["HOME"] = str(home)
    workspace = base / "ws"
    workspace.mkdir()
    try:
        tether = asyncio.run(tether_echo(args.rounds, workspace))
        tmux = tmux_baseline(args.rounds)
        rpc, rpc_raw = asyncio.run(rpc_roundtrip(max(200, args.rounds * 10), workspace, base))
        big = base / "big.txt"
        with big.open("w") as fh:
            line = 0
            while fh.tell() < args.ingest_mb * 1_000_000:
                fh.write("".join(f"line {line + i} of the ingest benchmark\n" for i in range(10000)))
                line += 10000
        restart, import_mcp = asyncio.run(restart_to_first_call(workspace))
        over_http, over_stdio = asyncio.run(http_and_stdio_echo(args.rounds, workspace, base))
        raw_rate = raw_pty_rate(big)
        rate, screen_ms, screen_ok, _ = asyncio.run(ingest(workspace, big))
        attach_rate, attach_bytes, attach_repaints = asyncio.run(
            attach_throughput(workspace, f"cat {big}"))
        paced = base / "paced.py"
        paced.write_text(PACED_WRITER)
        paced_cmd = f"{sys.executable} {paced} 10e6 3"
        paced_rate, paced_bytes, paced_repaints = asyncio.run(
            attach_throughput(workspace, paced_cmd))
        # Last: it leaves 32 busy programs behind until the guardian is stopped.
        observe = asyncio.run(tether_observe(max(10, args.rounds // 2), workspace))
    finally:
        stop_guardians(base / "run")
    t50 = _pct(tether, 0.5) * 1000
    print(f"BashCommand echo (MCP client, warm shell): p50 {t50:.2f} ms  "
          f"p95 {_pct(tether, 0.95) * 1000:.2f} ms  (target p50 <= 5 ms)")
    if tmux:
        b50 = _pct(tmux, 0.5) * 1000
        print(f"baseline tmux send-keys + capture-pane:     p50 {b50:.2f} ms")
        print(f"ratio tether/tmux p50: {t50 / b50:.2f} (target <= 1.0)")
    else:
        print("baseline tmux: not installed; no ratio")
    print(f"samples: {len(tether)}; mean {statistics.mean(tether) * 1000:.2f} ms")
    o50 = _pct(observe, 0.5) * 1000
    print(f"Execution.observe of 32 busy executions: p50 {o50:.2f} ms  "
          f"p95 {_pct(observe, 0.95) * 1000:.2f} ms  (target p50 <= 20 ms; "
          f"ratio to target {o50 / 20:.2f})")
    r50, r99 = _pct(rpc, 0.5) * 1e6, _pct(rpc, 0.99) * 1e6
    b50, b99 = _pct(rpc_raw, 0.5) * 1e6, _pct(rpc_raw, 0.99) * 1e6
    print(f"guardian RPC round trip (hello): p50 {r50:.0f} us  p99 {r99:.0f} us  "
          f"(target p50 <= 150, p99 <= 500)")
    print(f"baseline raw pyzmq+msgpack echo:  p50 {b50:.0f} us  p99 {b99:.0f} us  "
          f"ratio p50 {r50 / b50:.2f}")
    print(f"ingest of cat {args.ingest_mb} MB: {rate:.1f} MB/s; raw PTY read {raw_rate:.1f} MB/s; "
          f"ratio {rate / raw_rate:.2f} (target >= 50 MB/s)")
    print(f"screen request after it: {screen_ms:.1f} ms (target <= 50 ms); "
          f"final screen {'correct' if screen_ok else 'WRONG'}")
    print(f"tether attach of cat {args.ingest_mb} MB: {attach_rate:.1f} MB/s shown in the "
          f"person's terminal ({attach_bytes / 1e6:.0f} MB, {attach_repaints} repaints after "
          f"falling behind); raw PTY read {raw_rate:.1f} MB/s; ratio {attach_rate / raw_rate:.2f} "
          f"(target >= 0.7); to the ingest rate above {attach_rate / rate:.2f}")
    print(f"tether attach of a program printing 10 MB/s for 3 s: {paced_rate:.1f} MB/s shown "
          f"({paced_bytes / 1e6:.1f} MB), {paced_repaints} repaints (keeps up when 0)")
    h50, d50 = _pct(over_http, 0.5) * 1000, _pct(over_stdio, 0.5) * 1000
    print(f"BashCommand echo over streamable HTTP: p50 {h50:.2f} ms  p95 "
          f"{_pct(over_http, 0.95) * 1000:.2f} ms; over stdio p50 {d50:.2f} ms; HTTP - stdio "
          f"{h50 - d50:+.2f} ms (target <= +2 ms)")
    s50, i50 = _pct(restart, 0.5), _pct(import_mcp, 0.5)
    print(f"front-end restart to first successful call: p50 {s50:.2f} s (target <= 1.5 s); "
          f"python -c 'import mcp' {i50:.2f} s; ratio {s50 / i50:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
