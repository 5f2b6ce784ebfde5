"""Configuration from environment variables, read once at process start and passed down."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.protocol.limits import (
    EXECUTION_HEAD_BYTES,
    EXECUTION_RETAIN_BYTES,
    MAX_HEAD_BYTES,
    MAX_RETAIN_BYTES,
    MAX_RUNNING_CONFIGURED,
    MAX_RUNNING_PER_GUARDIAN,
    MAX_RUNNING_PER_THREAD,
    MIN_RETAIN_BYTES,
)

DEFAULT_IDLE_S = 24 * 3600.0
DEFAULT_NOTIFY_TIMEOUT_S = 10.0
MAX_NOTIFY_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Config:
    """Where Tether keeps things and how long guardians live.

    ``state_home``: TETHER_HOME, else $XDG_STATE_HOME/tether, else ~/.local/state/tether.
    ``runtime_dir``: TETHER_RUNTIME_DIR, else $XDG_RUNTIME_DIR/tether, else /tmp/tether-<uid>.
    ``guardian_idle_s``: TETHER_GUARDIAN_IDLE_S (default 24 h).
    ``home``: HOME; a workspace may not be ``/``, the home directory or an ancestor of it
    (``workspace_too_broad``) unless listed in ``broad_workspaces_allowed``:
    TETHER_ALLOW_BROAD_WORKSPACES, paths separated by ``:`` (for example ``/`` or ``$HOME``).
    ``max_running_per_thread``, ``max_running_per_guardian``: TETHER_MAX_RUNNING_PER_THREAD
    (default 64), TETHER_MAX_RUNNING_PER_GUARDIAN (default 256): background commands and
    managed agents running at once.
    ``output_head_bytes``, ``output_tail_bytes``: TETHER_OUTPUT_HEAD_BYTES (default 64 KiB,
    0 keeps no head), TETHER_OUTPUT_TAIL_BYTES (default 1 MiB): the first and last bytes of
    each execution's output that its journal keeps.
    ``notify_command``, ``notify_timeout_s``: TETHER_NOTIFY_COMMAND, TETHER_NOTIFY_TIMEOUT_S.
    """

    state_home: Path
    runtime_dir: Path
    guardian_idle_s: float
    home: Path = Path("/nonexistent")
    broad_workspaces_allowed: frozenset[str] = frozenset()
    max_running_per_thread: int = MAX_RUNNING_PER_THREAD
    max_running_per_guardian: int = MAX_RUNNING_PER_GUARDIAN
    output_head_bytes: int = EXECUTION_HEAD_BYTES
    output_tail_bytes: int = EXECUTION_RETAIN_BYTES
    #: TETHER_NOTIFY_COMMAND: the operator hook's argv (docs/tools.md#the-operator-hook), a
    #: JSON array of strings or words split as a shell would (never run by one); empty: none.
    notify_command: tuple[str, ...] = ()
    #: TETHER_NOTIFY_TIMEOUT_S (default 10, 0.1 to 300): how long one run of the hook may take.
    notify_timeout_s: float = DEFAULT_NOTIFY_TIMEOUT_S

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
        return cls(
            state_home=state.absolute(), runtime_dir=runtime.absolute(), guardian_idle_s=idle,
            home=home.absolute(), broad_workspaces_allowed=allowed,
            max_running_per_thread=_count(env, "TETHER_MAX_RUNNING_PER_THREAD",
                                          MAX_RUNNING_PER_THREAD, 1, MAX_RUNNING_CONFIGURED),
            max_running_per_guardian=_count(env, "TETHER_MAX_RUNNING_PER_GUARDIAN",
                                            MAX_RUNNING_PER_GUARDIAN, 1, MAX_RUNNING_CONFIGURED),
            output_head_bytes=_count(env, "TETHER_OUTPUT_HEAD_BYTES", EXECUTION_HEAD_BYTES, 0,
                                     MAX_HEAD_BYTES),
            output_tail_bytes=_count(env, "TETHER_OUTPUT_TAIL_BYTES", EXECUTION_RETAIN_BYTES,
                                     MIN_RETAIN_BYTES, MAX_RETAIN_BYTES),
            notify_command=notify_argv(env.get("TETHER_NOTIFY_COMMAND", "")),
            notify_timeout_s=_seconds(env, "TETHER_NOTIFY_TIMEOUT_S", DEFAULT_NOTIFY_TIMEOUT_S,
                                      0.1, MAX_NOTIFY_TIMEOUT_S),
        )


def notify_argv(raw: str) -> tuple[str, ...]:
    """TETHER_NOTIFY_COMMAND as an argument vector: a JSON array of strings (``["notify-send",
    "tether"]``) or words split as a shell would split them (``notify-send tether``), which
    is then run as that argv, never by a shell. Empty: no hook."""
    import json
    import shlex

    raw = raw.strip()
    if not raw:
        return ()
    if raw.startswith("["):
        try:
            argv = json.loads(raw)
        except ValueError:
            raise ValueError("TETHER_NOTIFY_COMMAND starts with '[' but is not a JSON array of "
                             "strings") from None
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("TETHER_NOTIFY_COMMAND must be a JSON array of strings")
    else:
        try:
            argv = shlex.split(raw)
        except ValueError as exc:
            raise ValueError(f"TETHER_NOTIFY_COMMAND cannot be split into words: {exc}") from None
    if not argv or not argv[0] or any("\x00" in a for a in argv):
        raise ValueError("TETHER_NOTIFY_COMMAND must name a program (and no NUL bytes)")
    return tuple(argv)


def _seconds(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not low <= value <= high:  # NaN fails both
        raise ValueError(f"{name} must be from {low:g} to {high:g} seconds, got {raw}")
    return value


def _count(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """The whole number ``env[name]`` names (``default`` when unset or empty), which must lie
    in ``low``-``high``: anything else is refused by name, never guessed."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be from {low} to {high}, got {value}")
    return value
