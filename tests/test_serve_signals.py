"""``tether serve`` stops promptly and quietly on SIGINT and SIGTERM (MCP clients such as
Claude Code stop their servers with SIGINT first, then SIGTERM), even while stdin stays open."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.conftest import stdio_params
from tether.shared.config import Config

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "signal-test", "version": "1"}}}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_serve_stops_on_signal_within_a_second(sig: signal.Signals, tether_env: Config) -> None:
    params = stdio_params()
    proc = subprocess.Popen([params.command, *params.args], env=params.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == 1 and "result" in reply  # serving, stdin still open
        sent = time.monotonic()
        proc.send_signal(sig)
        status = proc.wait(timeout=5)
        took = time.monotonic() - sent
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert status == 0, stderr
    assert took < 1.0, f"took {took:.2f}s to stop"
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
