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

from mcp import Client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from frontend.server import build_server  # noqa: E402
from shared.config import Config  # noqa: E402


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


async def tether_echo(rounds: int, workspace: Path) -> list[float]:
    """BashCommand `echo hi` through the real MCP client (in-process front-end)."""
    samples = []
    async with Client(build_server(Config.from_env())) as client:
        init = await client.call_tool("Initialize", {"workspace_root": str(workspace)})
        assert init.structured_content is not None
        session = init.structured_content["data"]
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
        init = await client.call_tool("Initialize", {"workspace_root": str(workspace)})
        assert init.structured_content is not None
        session = init.structured_content["data"]
        scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
        ids = []
        for _ in range(32):
            started = await client.call_tool("BashCommand", {**scope, "action_json": {
                "type": "command", "is_background": True,
                "command": "while :; do echo busy $RANDOM; sleep 0.2; done"}})
            assert started.structured_content is not None
            ids.append(started.structured_content["data"]["execution_id"])
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
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
        observe = asyncio.run(tether_observe(max(10, args.rounds // 2), workspace))
    finally:
        subprocess.run(["pkill", "-f", f"guardian --workspace {workspace}"], check=False)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
