"""Stable error codes, defined once.

Every error that crosses a boundary (RPC reply, MCP tool result) carries one of these codes.
Codes are part of the contract: clients branch on them, so they never change meaning.

A code this build does not know (sent by a newer guardian) is kept by name as a
:class:`ForeignCode`, never guessed into one of ours: a client that knows the newer code can
still branch on it.

Exception tree::

    TetherError(code, message, data)      any failure with a stable code
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    """Every stable error code Tether returns."""

    # Request shape and limits
    INVALID_REQUEST = "invalid_request"
    # An idempotency key reused for a request with other params (or another method).
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    LIMIT_EXCEEDED = "limit_exceeded"
    # The host or the guardian ran out of something a start needs (descriptors, terminals,
    # processes, memory): ``data.resource`` names it, and nothing was started.
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNKNOWN_METHOD = "unknown_method"
    # Transport and guardian identity (docs/protocol.md#transport, docs/protocol.md#identity)
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
    # An ssh:// workspace's host could not be reached (connect, bootstrap or forward failed):
    # ``data.host`` names it and ``data.ssh_error`` is ssh's own word; nothing was sent.
    HOST_UNREACHABLE = "host_unreachable"
    # The guardian is handing itself over to newly installed code (docs/protocol.md#live-upgrade):
    # the request was not acted upon (``input_sent`` false) or was cut at its wait; send it
    # again (with the same idempotency key) once the guardian answers.
    GUARDIAN_UPGRADING = "guardian_upgrading"
    # ``guardian.upgrade`` found the installed code unable to take over (its dry run failed,
    # or the guardian could not be brought to a quiet point): nothing changed.
    UPGRADE_FAILED = "upgrade_failed"
    # Sessions and executions
    SESSION_MISMATCH = "session_mismatch"
    # "/", the home directory or one of its ancestors, unless the operator allows it.
    WORKSPACE_TOO_BROAD = "workspace_too_broad"
    NOT_FOUND = "not_found"
    SHELL_BUSY = "shell_busy"
    NOT_RUNNING = "not_running"
    STALE_GENERATION = "stale_generation"
    # The terminal did not take all the input before the deadline (its program is not reading):
    # ``input_sent`` is false (nothing), "partial" (with the byte counts) or "unknown".
    INPUT_INCOMPLETE = "input_incomplete"
    # An earlier attempt with this idempotency key began delivering and never finished: what
    # reached the terminal is unknown, and it is not sent again.
    DELIVERY_UNKNOWN = "delivery_unknown"
    INVALID_CURSOR = "invalid_cursor"
    INVALID_KEY = "invalid_key"
    EXECUTION_OBSERVATION_ISSUES = "execution_observation_issues"
    # Agents and prompts
    INPUT_NOT_READY = "input_not_ready"
    # The program's input box already holds text (a draft): typing would merge into it.
    INPUT_NOT_EMPTY = "input_not_empty"
    # Another input (prompt, text, keys, command) is being typed into the same runtime.
    TARGET_BUSY = "target_busy"
    PROMPT_ID_CONFLICT = "prompt_id_conflict"
    RECEIPT_LIMIT = "receipt_limit"
    UNKNOWN_RECOGNIZER = "unknown_recognizer"
    # The Herdr backend (docs/tools.md#herdr-backend): not configured for this caller (the
    # operator must act); Herdr's CLI gave no usable answer (``data.reason``: timeout,
    # output_limit, exit_status, usage_error, malformed_answer, spawn_failed); an answer
    # about another terminal than the binding's.
    HERDR_DISABLED = "herdr_disabled"
    HERDR_UNAVAILABLE = "herdr_unavailable"
    HERDR_TARGET_MISMATCH = "herdr_target_mismatch"
    # Authority: principals, profiles and modes (docs/security.md#profiles-and-modes,
    # docs/security.md#principals)
    TOOL_DENIED = "tool_denied"
    WORKSPACE_DENIED = "workspace_denied"
    MODE_DENIED = "mode_denied"
    MODE_CHANGED = "mode_changed"
    CONFIG_INVALID = "config_invalid"
    # The state directory cannot be written (a full disk): names the path and free space.
    STORAGE_UNAVAILABLE = "storage_unavailable"
    # Managed-agent lifecycle (docs/tools.md#managed-agents)
    CANCEL_NOT_ACKNOWLEDGED = "cancel_not_acknowledged"
    INVALID_STATE = "invalid_state"
    # cancel of an agent whose screen shows no turn (it waits for input): nothing pressed.
    NOT_BUSY = "not_busy"
    # respond to an approval that is no longer on screen (answered, replaced, its runtime
    # gone): nothing typed.
    APPROVAL_STALE = "approval_stale"
    # A program that could not be started (a managed agent's, or a background command's).
    SPAWN_FAILED = "spawn_failed"
    # Files (docs/tools.md#readfiles, docs/tools.md#editfiles). A path outside the thread's
    # workspace (symlinks resolved), or one the operating system will not open for Tether.
    DENIED = "denied"
    # A file that holds NUL bytes: not text, never returned as text.
    BINARY = "binary"
    # A read over its budget (per file or per call): the message names a range to ask for.
    TOO_LARGE = "too_large"
    # The file changed since the revision an edit names: nothing was written.
    STALE_REVISION = "stale_revision"
    # An edit of an existing file that names no revision (only creating a file needs none).
    REVISION_REQUIRED = "revision_required"
    # A search block that matches no place (the nearest is named) or several (all named).
    SEARCH_NOT_FOUND = "search_not_found"
    SEARCH_AMBIGUOUS = "search_ambiguous"
    # A ReadFiles whose files did not all read, or a release that kept some helpers.
    FILE_READ_ISSUES = "file_read_issues"
    TEMPORARY_RELEASE_ISSUES = "temporary_release_issues"
    # Anything unexpected: a bug, reported instead of crashing.
    INTERNAL = "internal_error"


class ForeignCode(str):
    """An error code this build does not know, kept by its name (from a newer guardian)."""

    __slots__ = ()

    @property
    def value(self) -> str:
        return str.__str__(self)


Code = ErrorCode | ForeignCode


class TetherError(Exception):
    """A failure with a stable :class:`ErrorCode`, a message naming the rule, and data.

    ``data`` is JSON/msgpack-safe detail for the client (for example ``input_sent`` or the
    limit that was hit).
    """

    def __init__(self, code: Code, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code: Code = code
        self.message = message
        self.data: dict[str, Any] = dict(data or {})

    def to_wire(self) -> dict[str, Any]:
        """The ``error`` map of a response envelope."""
        return {"code": str(self.code), "message": self.message, "data": self.data}

    @classmethod
    def from_wire(cls, error: Any) -> TetherError:
        """Rebuild an error from a response's ``error`` map.

        A well-formed code this build does not know keeps its name (:class:`ForeignCode`); a
        missing or malformed one is ``internal_error``.
        """
        if not isinstance(error, dict):
            return cls(ErrorCode.INTERNAL, "malformed error in reply")
        raw_code = error.get("code")
        code: Code
        try:
            code = ErrorCode(str(raw_code))
        except ValueError:
            code = (ForeignCode(raw_code) if isinstance(raw_code, str) and _CODE.fullmatch(raw_code)
                    else ErrorCode.INTERNAL)
        data = error.get("data")
        return cls(code, str(error.get("message", "")), data if isinstance(data, dict) else None)

    def __repr__(self) -> str:
        return f"TetherError({self.code.value!r}, {self.message!r})"


#: What a code looks like on the wire: anything else is not trusted as one.
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
