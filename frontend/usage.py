"""The usage log (docs/person.md#usage-log): one JSON line per event, private, size-rotated.

Enabled by ``TETHER_USAGE_LOG`` (a file path). Every MCP tool call writes:

- ``tool_started`` when the call begins,
- up to :data:`MAX_PHASE_PAIRS` ``tool_phase`` start/finish pairs (validation, admission,
  catalog, runtime_capture, prompt_rpc, wait_sleep, herdr_adapter, finalize) and at most one
  truncation marker once that cap is hit,
- one terminal ``tool_call`` with tool, action, backend, duration, outcome, code and the
  workflow counters,

all sharing a random ``usage_call_id``. Only finite classifications, durations and counts
are written: never command or prompt text, output, cursors, tokens, ids of records, or paths.
A ``tool_started`` without its ``tool_call`` means completion was not observed (a killed
process, a cancelled call, a rotation in between), not that the call is still running.

Logging never changes a call: whatever the arguments (unhashable, non-finite, of any type),
they classify as ``other`` or ``unknown``, and a failure inside the logging code is said once
on stderr and leaves the call's result as it was.

Phases are found through a context variable, so code deep in a call (the guardian locator)
can mark one without the tools passing a recorder around; outside a recorded call
:func:`phase` does nothing. The same way, BashCommand notes the wait it was asked for (its
validated arguments, :func:`wait_requested`) and the wait the guardian took
(:func:`wait_taken`): the log records what happened, never what the raw arguments suggest.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import logging
import os
import re
import secrets
import stat
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.protocol.file_methods import parse_path_spec
from tether.protocol.method_table import (
    EXEC_INPUT,
    EXEC_SCREEN,
    EXEC_START,
    EXEC_STATUS,
    EXEC_WAIT,
    EXEC_WAIT_TURN,
    THREAD_RESET_SHELL,
    Method,
)

if TYPE_CHECKING:  # the person's CLI imports this module (via guardians.py): keep it light
    import mcp_types as types

USAGE_SCHEMA = 1
WORKFLOW_SCHEMA = 1
OBSERVE_SCHEMA = 1
READ_REQUEST_SCHEMA = 1
TEMPORARY_USAGE_SCHEMA = 1
MAX_PHASE_PAIRS = 16
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: Rotated generations kept next to the log: ``usage.jsonl.1`` (newest) .. ``.3``.
KEEP_ROTATED = 3
PHASES = ("validation", "admission", "catalog", "runtime_capture", "prompt_rpc", "wait_sleep",
          "herdr_adapter", "finalize")
#: Tools whose calls are workflow observations (seed: ``workflow_schema=1``).
WORKFLOW_TOOLS = frozenset({"Execution", "Agent"})
#: BashCommand actions that consume ``wait_for_seconds`` (screen and wait_for_turn do not).
WAITING_ACTIONS = frozenset({"command", "status_check", "send_text", "send_keys"})

log = logging.getLogger(__name__)

_current: contextvars.ContextVar[CallRecorder | None] = contextvars.ContextVar(
    "tether_usage_call", default=None
)


# -- the file -------------------------------------------------------------------------------


class UsageFile:
    """Appends JSON lines to one private file and rotates it by size.

    Several front-ends may share a log: each line is one ``write`` on an ``O_APPEND`` fd, and
    a writer whose file was rotated away by another reopens the path on its next line.

    A log that cannot be written (its path is a directory, lies under a file, is not a
    regular file, is on /proc, ...) costs lines, never tool calls: it is said once on stderr,
    and every later line tries again. So does a full log that cannot be rotated (its
    directory refuses renames): nothing is appended past the limit until it can be.
    """

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._fd: int | None = None
        self._ino: int | None = None
        self._warned: set[str] = set()

    def warn_once(self, kind: str, message: str) -> None:
        """Say ``message`` on stderr the first time something of ``kind`` goes wrong: a
        broken log must not flood the log of the server it serves, nor go unnoticed."""
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("%s", message)

    def write(self, event: Mapping[str, Any]) -> None:
        try:
            line = json.dumps(event, separators=(",", ":"), sort_keys=True,
                              allow_nan=False) + "\n"
        except (TypeError, ValueError) as exc:  # a bug here: the call goes on without its line
            self.warn_once("encode", f"usage log {self.path}: an event could not be written "
                           f"({exc}); tool calls are not affected; please report this")
            return
        data = line.encode()
        try:
            fd = self._open()
            size = os.fstat(fd).st_size
            if size >= self.max_bytes:  # the last rotation failed (ours or another writer's)
                if not self._rotate():
                    return  # never append past the limit
                fd, size = self._open(), 0
            os.write(fd, data)
            if size + len(data) >= self.max_bytes:
                self._rotate()
        except OSError as exc:
            self.close()
            self.warn_once("write", f"usage log {self.path} cannot be written ({_reason(exc)});"
                           " tool calls go on unrecorded. Point TETHER_USAGE_LOG at a regular "
                           "file you can write (`tether doctor` checks it)")

    def _open(self) -> int:
        if self._fd is not None:
            try:
                if os.stat(self.path).st_ino == self._ino:
                    return self._fd
            except FileNotFoundError:
                pass
            self.close()  # rotated (or removed) by someone else: follow the path
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except FileExistsError as exc:  # a file where a directory should be: say that
            raise NotADirectoryError(errno.ENOTDIR, "a file, not a directory",
                                     exc.filename) from None
        # O_NONBLOCK: a FIFO without a reader fails instead of hanging the server.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
                     | os.O_NOCTTY | os.O_CLOEXEC, 0o600)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # never chmod a device, nor write lines into one
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file", str(self.path))
        os.fchmod(fd, 0o600)
        self._fd, self._ino = fd, st.st_ino
        return fd

    def _rotate(self) -> bool:
        """Shift the full log to ``.1`` (and older ones up); False, said once, if refused."""
        names = [self.path, *(self.path.with_name(f"{self.path.name}.{index}")
                              for index in range(1, KEEP_ROTATED + 1))]
        try:
            for index in range(KEEP_ROTATED - 1, -1, -1):
                # A missing one is no generation yet, or another writer rotated first.
                with contextlib.suppress(FileNotFoundError):
                    os.replace(names[index], names[index + 1])
        except OSError as exc:
            self.warn_once("rotate", (
                f"usage log {self.path} reached its limit of {self.max_bytes} bytes "
                f"(TETHER_USAGE_LOG_MAX_BYTES) and cannot be rotated ({_reason(exc)}); nothing "
                "more is written to it until it can be. Make its directory writable (and "
                f"{self.path.name}.1-.{KEEP_ROTATED} plain files), or move the log away"))
            return False
        self.close()
        return True

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = self._ino = None


def _reason(exc: OSError) -> str:
    return f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc.strerror or exc)


# -- one call ---------------------------------------------------------------------------------


@dataclass
class CallRecorder:
    """The phases of one tool call; writes ``tool_phase`` events as they happen."""

    sink: UsageFile
    usage_call_id: str
    clock: Callable[[], float]
    pairs: int = 0
    truncated: bool = False
    last_finish: float | None = None
    summary: dict[str, dict[str, float]] = field(default_factory=dict)
    #: BashCommand's wait: ``requested`` (seconds or None, once validated), ``taken_ms``.
    wait: dict[str, float | None] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        emit = self._start(name)
        start = self.clock()
        outcome = "ok"
        try:
            yield
        except BaseException:
            outcome = "raised"
            raise
        finally:
            self.last_finish = self.clock()
            self._finish(name, self.last_finish - start, outcome, emit)

    def finalize(self) -> None:
        """Record ``finalize``: from the last phase (the guardian's reply) to the result."""
        if self.last_finish is not None:
            emit = self._start("finalize")
            self._finish("finalize", self.clock() - self.last_finish, "ok", emit)

    def _start(self, name: str) -> bool:
        if self.pairs < MAX_PHASE_PAIRS:
            self.pairs += 1
            self.sink.write({"event": "tool_phase", "usage_call_id": self.usage_call_id,
                             "phase": name, "edge": "start", "usage_schema": USAGE_SCHEMA})
            return True
        if not self.truncated:
            self.truncated = True
            self.sink.write({"event": "tool_phase", "usage_call_id": self.usage_call_id,
                             "phase": "truncated", "edge": "marker",
                             "max_pairs": MAX_PHASE_PAIRS, "usage_schema": USAGE_SCHEMA})
        return False

    def _finish(self, name: str, seconds: float, outcome: str, emit: bool) -> None:
        ms = round(seconds * 1000, 3)
        # Suppressed phases still count in the terminal summary.
        entry = self.summary.setdefault(name, {"count": 0, "total_ms": 0.0})
        entry["count"] += 1
        entry["total_ms"] = round(entry["total_ms"] + ms, 3)
        if emit:
            self.sink.write({"event": "tool_phase", "usage_call_id": self.usage_call_id,
                             "phase": name, "edge": "finish", "duration_ms": ms,
                             "outcome": outcome, "usage_schema": USAGE_SCHEMA})


#: What :func:`phase` returns outside a recorded call: reusable, and free to enter.
_NOT_RECORDED: contextlib.nullcontext[None] = contextlib.nullcontext()


def phase(name: str) -> contextlib.AbstractContextManager[None]:
    """Mark a phase of the tool call in progress (nothing outside a recorded call: a shared
    null context, not a generator per phase, which every call would pay for)."""
    recorder = _current.get()
    if recorder is None:
        return _NOT_RECORDED
    return recorder.phase(name)


def wait_requested(seconds: float | None) -> None:
    """Note the validated ``wait_for_seconds`` of the call in progress (None: the default)."""
    recorder = _current.get()
    if recorder is not None:
        recorder.wait["requested"] = seconds


def wait_taken(ms: int) -> None:
    """Note the wait the guardian answered after: the call reached it with this allowance."""
    recorder = _current.get()
    if recorder is not None:
        recorder.wait["taken_ms"] = ms


#: Guardian methods whose time is mostly a terminal's: what ran, was typed, or is on screen.
_RUNTIME_CAPTURE = frozenset({EXEC_START, EXEC_INPUT, EXEC_STATUS, EXEC_SCREEN,
                              THREAD_RESET_SHELL})


def phase_for_method(method: Method[Any, Any]) -> str:
    """Which phase a guardian RPC belongs to."""
    if method is EXEC_WAIT or method is EXEC_WAIT_TURN:
        return "wait_sleep"
    if method.name.startswith("agent."):
        return "prompt_rpc"
    if method in _RUNTIME_CAPTURE:
        return "runtime_capture"
    return "catalog"


# -- the log ---------------------------------------------------------------------------------


class UsageLog:
    """Wraps tool calls; a disabled log (no ``TETHER_USAGE_LOG``) costs one branch."""

    def __init__(self, sink: UsageFile | None, clock: Callable[[], float] = time.perf_counter,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.sink = sink
        self.clock = clock
        self.wall_ms = wall_ms

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> UsageLog:
        env = os.environ if env is None else env
        raw = env.get("TETHER_USAGE_LOG", "")
        if not raw:
            return cls(None)
        limit = env.get("TETHER_USAGE_LOG_MAX_BYTES", "")
        try:
            max_bytes = int(limit) if limit else DEFAULT_MAX_BYTES
        except ValueError:
            raise ValueError(
                f"TETHER_USAGE_LOG_MAX_BYTES must be a number of bytes, got {limit!r}") from None
        if max_bytes < 4096:
            raise ValueError("TETHER_USAGE_LOG_MAX_BYTES must be at least 4096")
        return cls(UsageFile(Path(raw).expanduser().absolute(), max_bytes))

    async def around(
        self, tool: str, arguments: Mapping[str, Any] | None,
        run: Callable[[], Awaitable[types.CallToolResult]],
    ) -> types.CallToolResult:
        """Run one tool call, logging it when the log is enabled."""
        sink = self.sink
        if sink is None:
            return await run()
        args = dict(arguments) if isinstance(arguments, Mapping) else {}
        call_id = secrets.token_hex(8)
        base = {"usage_call_id": call_id, "usage_schema": USAGE_SCHEMA,
                **(self._safely(classify, tool, args) or UNCLASSIFIED)}
        sink.write({"event": "tool_started", "ts_unix_ms": self.wall_ms(), **base})
        recorder = CallRecorder(sink, call_id, self.clock)
        token = _current.set(recorder)
        start = self.clock()
        result: types.CallToolResult | None = None
        try:
            result = await run()
            return result
        finally:
            _current.reset(token)
            recorder.finalize()
            event: dict[str, Any] = {
                "event": "tool_call", "ts_unix_ms": self.wall_ms(), **base,
                "duration_ms": round((self.clock() - start) * 1000, 3),
                "phases": recorder.summary,
            }
            if recorder.truncated:
                event["phases_truncated"] = True
            event.update(self._safely(outcome_fields, result) or {"outcome": "unknown"})
            event.update(self._safely(workflow_fields, tool, args, result) or {})
            if event["tool"] == "BashCommand" and event["action"] in WAITING_ACTIONS:
                event.update(self._safely(wait_fields, recorder.wait) or {})
            sink.write(event)

    def _safely(self, fields: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
        """``fields(*args)``, or None (said once on stderr) if it raises: a bug in the
        logging code costs the log a detail, never the call its result."""
        try:
            return fields(*args)
        except Exception as exc:
            assert self.sink is not None
            self.sink.warn_once(f"fields:{fields.__name__}", (
                f"usage log: {fields.__name__} failed ({type(exc).__name__}: {exc}); the "
                "tool calls are not affected, their log lines lack these fields; please "
                "report this"))
            return None


def _action_json(args: Mapping[str, Any]) -> dict[str, Any]:
    action = args.get("action_json")
    if isinstance(action, str):  # some clients send the action as JSON text
        try:
            action = json.loads(action)
        except ValueError:
            return {}
    return action if isinstance(action, dict) else {}


def _action_of(tool: str, args: Mapping[str, Any]) -> Any:
    if tool == "BashCommand":
        return _action_json(args).get("type")
    if tool == "Execution":
        action = args.get("action")
        return action.get("type") if isinstance(action, dict) else None
    if tool == "Agent":
        return args.get("action")
    if tool == "Initialize":
        return args.get("type", "first_call")
    if tool == "ReadFiles":
        return "read"
    if tool == "EditFiles":
        return "release_temporary" if args.get("release_temporary") is not None else "edit"
    return None


#: The finite vocabulary of actions and backends; anything else is logged as ``other``, so a
#: client's free text can never reach the log through an action name.
ACTIONS: dict[str, frozenset[str]] = {
    "Initialize": frozenset({"first_call", "status", "reset_shell", "change_mode"}),
    "BashCommand": frozenset({"command", "status_check", "send_text", "send_keys", "screen",
                              "wait_for_turn"}),
    "Execution": frozenset({"list", "get", "explain", "read", "observe", "wait"}),
    "Agent": frozenset({"list", "get", "read", "explain", "wait", "prompt", "launch", "close",
                        "resume", "archive", "unarchive", "cancel", "label", "notifications",
                        "approvals", "respond"}),
    "ReadFiles": frozenset({"read"}),
    "EditFiles": frozenset({"edit", "release_temporary"}),
}
BACKENDS = frozenset({"native", "herdr"})
#: What a call is logged as when even its classification failed.
UNCLASSIFIED = {"tool": "other", "action": "unknown", "backend": "unknown"}
_SAFE_WORD = frozenset("abcdefghijklmnopqrstuvwxyz_")


def _word(value: Any) -> str | None:
    """A classification value, only if it is a short lowercase word (never free text)."""
    if isinstance(value, str) and 0 < len(value) <= 40 and set(value) <= _SAFE_WORD:
        return value
    return None


def _known(value: Any, vocabulary: frozenset[str]) -> str:
    if value is None:
        return "unknown"
    # Only a string is looked up: a list or a dict from the client is unhashable.
    return value if isinstance(value, str) and value in vocabulary else "other"


def classify(tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Tool, action and backend: finite classifications only (never raises)."""
    if tool not in ACTIONS:
        return dict(UNCLASSIFIED)
    backend = _known(args.get("backend", "native"), BACKENDS) if tool == "Agent" else "native"
    return {"tool": tool, "action": _known(_action_of(tool, args), ACTIONS[tool]),
            "backend": backend}


def outcome_fields(result: types.CallToolResult | None) -> dict[str, Any]:
    if result is None:
        return {"outcome": "abandoned", "code": None}  # cancelled or raised past the server
    content = result.structured_content or {}
    status = content.get("status")
    if result.is_error:
        outcome = "error"
    elif status == "completed_with_issues":
        outcome = "completed_with_issues"
    else:
        outcome = "ok"
    fields: dict[str, Any] = {"outcome": outcome, "code": _code(content.get("code"))}
    fields["response_bytes"] = sum(len(text) for c in result.content
                                   if isinstance(text := getattr(c, "text", None), str))
    return fields


#: An error code as Tether writes them (``not_found``); a newer guardian's code of this shape
#: is kept, anything else is logged as ``unknown`` (never free text).
_CODE = re.compile(r"[a-z][a-z0-9_]{0,47}")


def _code(value: Any) -> str | None:
    """The result's code; None when it has none."""
    if value is None:
        return None
    return value if isinstance(value, str) and _CODE.fullmatch(value) else "unknown"


def workflow_fields(
    tool: str, args: Mapping[str, Any], result: types.CallToolResult | None
) -> dict[str, Any]:
    """Counters that say what a call did, without saying what it was about."""
    fields: dict[str, Any] = {}
    action = _known(_action_of(tool, args), ACTIONS.get(tool, frozenset()))
    data: dict[str, Any] = {}
    if result is not None and isinstance(result.structured_content, dict):
        raw = result.structured_content.get("data")
        data = raw if isinstance(raw, dict) else {}
    if tool in WORKFLOW_TOOLS:
        fields["workflow_schema"] = WORKFLOW_SCHEMA
    if tool == "Execution" and action == "observe":
        fields["observe_schema"] = OBSERVE_SCHEMA
        items = (args.get("action") or {}).get("items")
        if isinstance(items, list):
            fields["batch_items"] = fields["observe_requested_items"] = len(items)
        returned = data.get("items")
        if isinstance(returned, list):
            fields["observe_returned_items"] = len(returned)
            fields["observe_items_with_issues"] = sum(
                1 for item in returned if isinstance(item, dict) and item.get("errors"))
    if action == "wait" and "outcome" in data and tool in WORKFLOW_TOOLS:
        outcome = _word(data.get("outcome"))
        if outcome:
            fields["catalog_outcome"] = outcome
    if tool == "Agent" and _known(args.get("backend", "native"), BACKENDS) == "herdr":
        if action == "prompt":
            fields["herdr_submission"] = herdr_submission(result, data)
        return fields
    if tool == "Agent" and action in ("approvals", "respond"):
        fields.update(approval_fields(action, data, result))
    if tool == "ReadFiles":
        fields["read_request_schema"] = READ_REQUEST_SCHEMA
        fields.update(read_shape_fields(args.get("paths")))
    if tool in ("ReadFiles", "EditFiles"):
        fields.update(temporary_fields(data.get("temporary")))
    receipt = data.get("receipt")
    if tool == "Agent" and isinstance(receipt, dict):
        fields["receipt_observed"] = True
        for key in ("delivered", "activity_observed", "wait_reached"):
            if isinstance(receipt.get(key), bool):
                fields[f"receipt_{key}"] = receipt[key]
        # A repeated prompt_id answers with the first delivery's receipt: replayed, nothing
        # sent. Without these, a repeat reads as one more delivery.
        for key in ("replayed", "input_sent"):
            if isinstance(data.get(key), bool):
                fields[f"receipt_{key}"] = data[key]
    return fields


def herdr_submission(result: types.CallToolResult | None, data: Mapping[str, Any]) -> str:
    """What a Herdr prompt call did with its text: ``acknowledged`` (Herdr said it submitted
    it; not that the work was done), ``uncertain`` (``input_sent: "unknown"``: a timeout or
    an unreadable answer; never resent), ``not_sent``, or ``unknown`` (no result observed)."""
    if result is None:
        return "unknown"
    if not result.is_error:
        return "acknowledged" if data.get("acknowledged") is True else "unknown"
    sent = data.get("input_sent")
    if sent == "unknown":
        return "uncertain"
    return "not_sent" if sent is False else "unknown"
#: How an approval ended, and what a response typed: the finite words the log keeps.
_HOW = frozenset({"approved", "denied", "other", "unknown"})


def approval_fields(action: str, data: Mapping[str, Any],
                    result: types.CallToolResult | None) -> dict[str, Any]:
    """Approvals listed (and how many pending), a response's outcome — replayed, stale, how
    the approval ended, whether the screen left the question — as counts and words, never
    the request's text (docs/person.md#usage-log)."""
    fields: dict[str, Any] = {}
    if action == "approvals":
        listed = data.get("approvals")
        if isinstance(listed, list):
            fields["approvals_listed"] = len(listed)
            fields["approvals_pending"] = sum(
                1 for a in listed if isinstance(a, dict) and a.get("status") == "pending")
        return fields
    content = (result.structured_content or {}) if result is not None else {}
    fields["approval_stale"] = content.get("code") == "approval_stale"
    response = data.get("response")
    if isinstance(response, dict):
        if isinstance(data.get("replayed"), bool):
            fields["approval_replayed"] = data["replayed"]
        if isinstance(response.get("left_approval"), bool):
            fields["approval_left"] = response["left_approval"]
        approval = data.get("approval")
        resolved = approval.get("resolved") if isinstance(approval, dict) else None
        how = resolved.get("how") if isinstance(resolved, dict) else None
        fields["approval_outcome"] = how if how in _HOW else "pending"
    return fields


#: ReadFiles request shapes (seed "Usage metrics for plugin workflows"), by the tool's parser.
_READ_SHAPES = {"whole": "read_whole_file_requests", "bounded": "read_bounded_range_requests",
                "open_ended": "read_open_ended_range_requests"}


def read_shape_fields(paths: Any) -> dict[str, int]:
    """How many requested entries read a whole file, a range with an end (``:10-20``,
    ``:-20``) or one without (``:20-``, ``:20``); duplicates count separately. An invalid or
    empty request has unknown shapes: nothing is written for them."""
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        return {}
    counts = dict.fromkeys(_READ_SHAPES.values(), 0)
    try:
        for path in paths:
            counts[_READ_SHAPES[parse_path_spec(path).shape]] += 1
    except ValueError:
        return {}
    return counts


def temporary_fields(usage: Any) -> dict[str, Any]:
    """The managed directory as measured in this call: missing or malformed values are left
    out, never made zero or false; a measured empty directory is zeros and false."""
    if not isinstance(usage, Mapping):
        return {}
    fields: dict[str, Any] = {}
    for key in ("used_bytes", "files", "budget_bytes"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            fields[f"temporary_{key}"] = value
    if isinstance(usage.get("over_budget"), bool):
        fields["temporary_over_budget"] = usage["over_budget"]
    if fields:
        fields["temporary_usage_schema"] = TEMPORARY_USAGE_SCHEMA
    return fields


def wait_fields(wait: Mapping[str, float | None]) -> dict[str, Any]:
    """Requested vs server-selected inline wait (seed "Usage metrics"), from what the tool
    noted: the request is unknown when the arguments were refused, the effective wait when
    the call was refused before the guardian took it (a bad scope, a mode, a busy shell)."""
    if "requested" not in wait:
        return {"requested_wait_policy": "unknown"}
    requested = wait["requested"]
    policy = "default" if requested is None else "explicit"
    fields: dict[str, Any] = {"requested_wait_policy": policy}
    if requested is not None:
        fields["requested_wait_ms"] = int(requested * 1000)
    if wait.get("taken_ms") is not None:
        fields.update(effective_wait_policy=policy, effective_wait_ms=wait["taken_ms"],
                      effective_wait_mode="synchronous")
    return fields
