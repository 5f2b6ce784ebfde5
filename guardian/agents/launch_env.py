"""The private environment of managed agents: ``Agent.launch {env}``.

A launch's variables (an API key, a base URL, a ``PATH``) reach the agent's process and every
resume of it, and nowhere else: they are kept in one file per agent, mode 0600 in a 0700
directory of the guardian's state directory, never in the catalog, a log line, a usage event
or a reply (which may list the names). Archiving the agent removes its file; an agent whose
file is gone resumes without those variables.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from tether.shared.paths import ensure_private_dir, write_private_file
from tether.shared.store.store_errors import storage_unavailable

DIRECTORY = "agent-env"


class LaunchEnvStore:
    """One private JSON file per agent that was launched with variables."""

    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir / DIRECTORY

    def _path(self, execution_id: str) -> Path:
        return self._dir / f"{execution_id}.json"

    def save(self, execution_id: str, env: dict[str, str]) -> None:
        """Keep ``env`` for ``execution_id`` (nothing is written for an empty one)."""
        if not env:
            return
        ensure_private_dir(self._dir, what="agent environment dir")
        try:
            write_private_file(self._path(execution_id), json.dumps(env).encode())
        except OSError as exc:  # a full disk: say so (the message names no value)
            raise storage_unavailable(self._dir, exc) from None

    def load(self, execution_id: str) -> dict[str, str]:
        """The agent's variables; none when it was launched without (or was archived)."""
        try:
            data = self._path(execution_id).read_bytes()
        except FileNotFoundError:
            return {}
        env = json.loads(data)
        return {str(name): str(value) for name, value in env.items()}

    def remove(self, execution_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(execution_id))
