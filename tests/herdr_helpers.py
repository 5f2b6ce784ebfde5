"""The Herdr backend's test kit: the fake ``herdr`` installed as an executable, its world (the
JSON file at the socket path), its log, and operator configuration files."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAKE = Path(__file__).resolve().parent / "fakes" / "fake_herdr.py"


def agent_info(pane: str, terminal: str, status: str = "idle", **extra: Any) -> dict[str, Any]:
    """An ``AgentInfo`` as Herdr's schema has it (its required fields, and a few more)."""
    workspace = pane.split(":")[0]
    return {"terminal_id": terminal, "agent_status": status, "workspace_id": workspace,
            "tab_id": f"{workspace}:t1", "pane_id": pane, "focused": False, "revision": 7,
            "agent": "claude", "name": None, "title": "fixing tests", "interactive_ready": True,
            "state_change_seq": 3, **extra}


@dataclass
class FakeHerdr:
    """The fake's executable, its "server" file and its log."""

    executable: Path
    socket: Path

    @classmethod
    def install(cls, directory: Path) -> FakeHerdr:
        directory.mkdir(parents=True, exist_ok=True)
        exe = directory / "herdr"
        # The test's own interpreter runs it, named by the kernel from the #! line.
        exe.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        exe.chmod(0o755)
        return cls(exe, directory / "herdr.sock")

    def write(self, world: dict[str, Any]) -> None:
        """Replace the world at once (a wait in progress re-reads it)."""
        tmp = self.socket.with_suffix(".tmp")
        tmp.write_text(json.dumps(world))
        os.replace(tmp, self.socket)

    def world(self) -> dict[str, Any]:
        world: dict[str, Any] = json.loads(self.socket.read_text())
        return world

    def switch(self, **switches: Any) -> None:
        self.write({**self.world(), "switches": switches})

    def log(self) -> list[dict[str, Any]]:
        path = self.socket.with_name(self.socket.name + ".log")
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def runs(self, *command: str) -> list[dict[str, Any]]:
        """The logged runs whose argv begins with ``command``."""
        return [e for e in self.log() if e["argv"][:len(command)] == list(command)]


def write_config(path: Path, data: dict[str, Any] | str, mode: int = 0o600) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    path.chmod(mode)
    return path


def config_for(fake: FakeHerdr, bindings: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"executable": str(fake.executable), "socket_path": str(fake.socket),
            "bindings": bindings, **extra}
