"""Managed agents in tests: the fake agent as a launched agent, polling its state, and the
launcher program that starts a front-end inside an agent's terminal."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from mcp import Client

from tests.helpers import poll
from tests.mcp_helpers import agent

FAKE_AGENT = Path(__file__).resolve().parent / "fakes" / "fake_agent.py"
LAUNCHER = Path(__file__).resolve().parent / "programs" / "agent_launcher.py"
TETHER = str(Path(sys.executable).with_name("tether"))


def fake_argv(log: Path, *extra: str) -> list[str]:
    return [sys.executable, str(FAKE_AGENT), "--log", str(log), *extra]


async def launch(client: Client, session: dict[str, Any], log: Path, *extra: str,
                 **options: Any) -> dict[str, Any]:
    """Launch the fake agent as a managed ``command`` agent recognised as Claude Code."""
    data = (await agent(client, session, {"action": "launch", "provider": "command",
                                          "argv": fake_argv(log, *extra), "recognizer": "claude",
                                          **options}))["data"]
    return dict(data["agent"])


async def get(client: Client, session: dict[str, Any], execution_id: str) -> dict[str, Any]:
    data: dict[str, Any] = (await agent(client, session, {"action": "get", "target": execution_id}))["data"]
    return data


async def wait_state(client: Client, session: dict[str, Any], execution_id: str, state: str,
                     timeout: float = 15.0, attention: str | None = None) -> dict[str, Any]:
    """Poll ``Agent get`` until the agent reads ``state`` (and ``attention``)."""
    deadline = time.monotonic() + timeout
    while True:
        data = await get(client, session, execution_id)
        record = data["agent"]
        if record["agent_state"] == state and (attention is None or record["attention"] == attention):
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"{execution_id} stayed {record['agent_state']} "
                                 f"(attention {record['attention']}), wanted {state}: {data['events']}")
        time.sleep(0.05)


def transitions(events: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    return [(e["from_state"], e["to_state"]) for e in events]


def pid_of(record: dict[str, Any]) -> int:
    return int(record["runtime"]["pid"])


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stable(notice: dict[str, Any]) -> dict[str, Any]:
    """A notification without its delivery fields (they change when it is typed)."""
    return {k: v for k, v in notice.items() if k != "delivered_prompt_id"}


def run_prompt(spec_path: Path, out_path: Path, scrub: bool, launches: list[dict[str, Any]]) -> str:
    """A ``run:`` prompt that makes a fake agent start the launcher (a real front-end over
    stdio) inside its own terminal."""
    spec_path.write_text(json.dumps({"tether": TETHER, "scrub": scrub, "launches": launches}))
    return f"run: {sys.executable} {LAUNCHER} {spec_path} {out_path}"


def launched_by(out_path: Path, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The launcher's results, once it has written them; each must have succeeded."""
    results: list[dict[str, Any]] = poll(
        lambda: out_path.exists() and json.loads(out_path.read_text())["results"],
        timeout=timeout, interval=0.1, what=f"launcher output {out_path.name}")
    for result in results:
        assert result.get("ok"), result
    return results
