"""Stable error codes, defined once.

Every error that crosses a boundary (RPC reply, MCP tool result) carries one of these codes.
Codes are part of the contract: clients branch on them, so they never change meaning.

Exception tree::

    TetherError(code, message, data)      any failure with a stable code
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Every stable error code Tether returns."""

    # Request shape and limits
    INVALID_REQUEST = "invalid_request"
    LIMIT_EXCEEDED = "limit_exceeded"
    UNKNOWN_METHOD = "unknown_method"
    # Transport and guardian identity (R5-R10)
    UNAUTHORIZED = "unauthorized"
    WRONG_GUARDIAN = "wrong_guardian"
    DEADLINE_EXPIRED = "deadline_expired"
    PROTOCOL_MISMATCH = "protocol_mismatch"
    CAPABILITY_MISSING = "capability_missing"
    GUARDIAN_UNAVAILABLE = "guardian_unavailable"
    GUARDIAN_START_FAILED = "guardian_start_failed"
    # A guardian that is alive (identity checked) but does not answer: stopped, overloaded.
    GUARDIAN_UNRESPONSIVE = "guardian_unresponsive"
    RUNTIME_DIR_UNSAFE = "runtime_dir_unsafe"
    # Sessions and executions
    SESSION_MISMATCH = "session_mismatch"
    # "/", the home directory or one of its ancestors, unless the operator allows it.
    WORKSPACE_TOO_BROAD = "workspace_too_broad"
    NOT_FOUND = "not_found"
    SHELL_BUSY = "shell_busy"
    NOT_RUNNING = "not_running"
    STALE_GENERATION = "stale_generation"
    INVALID_CURSOR = "invalid_cursor"
    INVALID_KEY = "invalid_key"
    EXECUTION_OBSERVATION_ISSUES = "execution_observation_issues"
    # Agents and prompts
    INPUT_NOT_READY = "input_not_ready"
    # Another input (prompt, text, keys, command) is being typed into the same runtime.
    TARGET_BUSY = "target_busy"
    PROMPT_ID_CONFLICT = "prompt_id_conflict"
    RECEIPT_LIMIT = "receipt_limit"
    UNKNOWN_RECOGNIZER = "unknown_recognizer"
    HERDR_DISABLED = "herdr_disabled"
    # Authority: principals, profiles and modes (R27, R28)
    TOOL_DENIED = "tool_denied"
    WORKSPACE_DENIED = "workspace_denied"
    MODE_DENIED = "mode_denied"
    CONFIG_INVALID = "config_invalid"
    # Anything unexpected: a bug, reported instead of crashing.
    INTERNAL = "internal_error"


class TetherError(Exception):
    """A failure with a stable :class:`ErrorCode`, a message naming the rule, and data.

    ``data`` is JSON/msgpack-safe detail for the client (for example ``input_sent`` or the
    limit that was hit).
    """

    def __init__(self, code: ErrorCode, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: dict[str, Any] = dict(data or {})

    def to_wire(self) -> dict[str, Any]:
        """The ``error`` map of a response envelope."""
        return {"code": str(self.code), "message": self.message, "data": self.data}

    @classmethod
    def from_wire(cls, error: Any) -> TetherError:
        """Rebuild an error from a response's ``error`` map; unknown codes become ``internal``."""
        if not isinstance(error, dict):
            return cls(ErrorCode.INTERNAL, "malformed error in reply")
        raw_code = error.get("code")
        try:
            code = ErrorCode(str(raw_code))
        except ValueError:
            code = ErrorCode.INTERNAL
        data = error.get("data")
        return cls(code, str(error.get("message", "")), data if isinstance(data, dict) else None)

    def __repr__(self) -> str:
        return f"TetherError({self.code.value!r}, {self.message!r})"
