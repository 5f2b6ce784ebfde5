"""Configuration from environment variables, read once at process start and passed down."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_IDLE_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Config:
    """Where Tether keeps things and how long guardians live.

    ``state_home``: TETHER_HOME, else $XDG_STATE_HOME/tether, else ~/.local/state/tether.
    ``runtime_dir``: TETHER_RUNTIME_DIR, else $XDG_RUNTIME_DIR/tether, else /tmp/tether-<uid>.
    ``guardian_idle_s``: TETHER_GUARDIAN_IDLE_S (default 24 h).
    ``home``: HOME; a workspace may not be ``/``, the home directory or an ancestor of it
    (``workspace_too_broad``) unless listed in ``broad_workspaces_allowed``:
    TETHER_ALLOW_BROAD_WORKSPACES, paths separated by ``:`` (for example ``/`` or ``$HOME``).
    """

    state_home: Path
    runtime_dir: Path
    guardian_idle_s: float
    home: Path = Path("/nonexistent")
    broad_workspaces_allowed: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        """Build from ``env`` (default: ``os.environ``)."""
        env = os.environ if env is None else env
        home = Path(env.get("HOME") or Path.home())
        if env.get("TETHER_HOME"):
            state = Path(env["TETHER_HOME"])
        elif env.get("XDG_STATE_HOME"):
            state = Path(env["XDG_STATE_HOME"]) / "tether"
        else:
            state = home / ".local" / "state" / "tether"
        if env.get("TETHER_RUNTIME_DIR"):
            runtime = Path(env["TETHER_RUNTIME_DIR"])
        elif env.get("XDG_RUNTIME_DIR"):
            runtime = Path(env["XDG_RUNTIME_DIR"]) / "tether"
        else:
            runtime = Path(f"/tmp/tether-{os.getuid()}")
        raw_idle = env.get("TETHER_GUARDIAN_IDLE_S", "")
        try:
            idle = float(raw_idle) if raw_idle else DEFAULT_IDLE_S
        except ValueError:
            raise ValueError(
                f"TETHER_GUARDIAN_IDLE_S must be a number of seconds, got {raw_idle!r}"
            ) from None
        if idle <= 0:
            raise ValueError("TETHER_GUARDIAN_IDLE_S must be positive")
        allowed = frozenset(
            os.path.realpath(entry)
            for entry in env.get("TETHER_ALLOW_BROAD_WORKSPACES", "").split(os.pathsep)
            if entry and os.path.isabs(entry)
        )
        return cls(state_home=state.absolute(), runtime_dir=runtime.absolute(), guardian_idle_s=idle,
                   home=home.absolute(), broad_workspaces_allowed=allowed)
