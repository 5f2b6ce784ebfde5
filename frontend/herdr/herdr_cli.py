"""Herdr's CLI, run once per step of a call (docs/tools.md#herdr-backend).

Only these commands of Herdr's CLI (0.7.5 and later) are ever run, each as a literal
argument vector (no shell):

- ``agent list``, to find the pane that holds a configured terminal id (Herdr takes an
  agent's name or pane id as a target, not a terminal id);
- ``agent get <pane>``, ``agent read <pane> --source recent --lines N``, ``agent explain
  <pane> --json``, ``agent wait <pane> [--until S]... --timeout MS``,
  ``agent prompt <pane> <text>``.

No server start, agent start, attach or raw keys: there is no code here that could ask for
them. Each run has the time left of the call's ``deadline_ms``, at most 64 KiB of stdout and
16 KiB of stderr (more ends the process), and the environment of
:meth:`~tether.frontend.herdr.operator_config.HerdrSettings.child_env`. A run that goes
over is killed with its process group.

Every answer that names a terminal is checked against the binding's terminal id: a pane
whose occupant changed since the listing is ``herdr_target_mismatch``, never another
terminal's data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.frontend import usage
from tether.frontend.herdr.operator_config import HerdrConfig, HerdrSettings
from tether.protocol.errors import ErrorCode, TetherError

MAX_STDOUT_BYTES = 64 * 1024
#: ``read``'s ``lines``: the default and the cap.
DEFAULT_READ_LINES = 100
MAX_READ_LINES = 1000
MAX_STDERR_BYTES = 16 * 1024
#: Herdr's lifecycle states (its ``AgentStatus``).
HERDR_STATES = ("idle", "working", "blocked", "done", "unknown")
#: Time kept back from a wait's ``--timeout`` so that Herdr's own timeout answer (after the
#: CLI's start-up) arrives before the call's deadline ends the process: a quarter of what is
#: left, at least this much, never more than half.
WAIT_MARGIN_MS = 250
#: A pane id as Herdr prints one (``w1:p1``); never an option.
PANE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
#: Herdr's error codes (``agent_not_found``); anything else is not repeated.
_HERDR_CODE = re.compile(r"[a-z][a-z0-9_]{0,47}")
#: Errors Herdr's server answers before it writes anything to a terminal.
_REFUSED_BEFORE_INPUT = frozenset({"agent_not_found", "agent_not_ready", "not_found",
                                   "invalid_params", "invalid_request", "server_not_running",
                                   "protocol_mismatch", "agent_not_running"})
#: What a record of Herdr's says of an agent, passed on when of the right type (never its
#: pane, tab, workspace or terminal ids: the alias is the caller's only name for it).
_AGENT_TEXT = ("agent", "display_agent", "name", "title", "terminal_title_stripped", "cwd",
               "foreground_cwd")
_AGENT_FLAGS = ("focused", "interactive_ready", "launch_pending", "screen_detection_skipped")
_AGENT_COUNTS = ("revision", "state_change_seq")
_MAX_FIELD_CHARS = 256


@dataclass(frozen=True, slots=True)
class Answer:
    """What one run printed, and how it ended (a negative status: killed by that signal)."""

    stdout: bytes
    stderr: bytes
    status: int


class _Overflow(Exception):
    def __init__(self, stream: str, limit: int) -> None:
        super().__init__(stream)
        self.stream, self.limit = stream, limit


def unavailable(reason: str, message: str, input_sent: bool | str, **detail: Any) -> TetherError:
    """``herdr_unavailable``: Herdr gave no usable answer (``reason`` says how)."""
    return TetherError(ErrorCode.HERDR_UNAVAILABLE, message,
                       {"reason": reason, "input_sent": input_sent, **detail})


class HerdrCli:
    """Herdr's CLI for one Agent call: one deadline (``deadline_ms``) for all its runs."""

    def __init__(self, settings: HerdrSettings, config: HerdrConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.env = settings.child_env(config)
        self.clock = clock
        self.deadline = clock() + config.deadline_ms / 1000

    def remaining_ms(self) -> int:
        return max(0, int((self.deadline - self.clock()) * 1000))

    async def run(self, args: Sequence[str], *, sends_input: bool = False) -> Answer:
        """Run the executable with ``args`` (literal), bounded in time and output."""
        command = " ".join(args[:2])
        left = self.deadline - self.clock()
        if left <= 0:
            raise unavailable("timeout", f"no time is left of deadline_ms "
                              f"({self.config.deadline_ms} ms) for herdr {command}; nothing "
                              "was run", False, deadline_ms=self.config.deadline_ms)
        with usage.phase("herdr_adapter"):
            return await self._run(list(args), command, left, sends_input)

    async def _run(self, args: list[str], command: str, left: float,
                   sends_input: bool) -> Answer:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.config.executable, *args, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=self.env, cwd="/", start_new_session=True, close_fds=True)
        except OSError as exc:
            raise unavailable("spawn_failed", f"the configured Herdr executable could not be "
                              f"started ({exc.strerror}); nothing was sent", False) from None
        assert proc.stdout is not None and proc.stderr is not None
        readers = [asyncio.ensure_future(_drain(proc.stdout, MAX_STDOUT_BYTES, "stdout")),
                   asyncio.ensure_future(_drain(proc.stderr, MAX_STDERR_BYTES, "stderr"))]
        uncertain: bool | str = "unknown" if sends_input else False
        try:
            async with asyncio.timeout(left):
                out, err = await asyncio.gather(*readers)
                status = await proc.wait()
        except TimeoutError:
            raise unavailable(
                "timeout", f"herdr {command} did not answer within deadline_ms "
                f"({self.config.deadline_ms} ms) and was ended"
                + ("; the prompt may or may not have been submitted, and it was not sent "
                   "again: look with get, read or wait before prompting again"
                   if sends_input else ""),
                uncertain, deadline_ms=self.config.deadline_ms) from None
        except _Overflow as over:
            raise unavailable(
                "output_limit", f"herdr {command} printed more than {over.limit // 1024} KiB "
                f"on {over.stream} (the limit) and was ended"
                + ("; whether the prompt was submitted is unknown, and it was not sent again"
                   if sends_input else ""),
                uncertain, stream=over.stream, limit=over.limit) from None
        finally:
            for reader in readers:
                reader.cancel()
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        return Answer(out, err, status)

    # -- the commands --------------------------------------------------------------------------

    async def agents(self) -> list[dict[str, Any]]:
        """``agent list``: every agent Herdr has (checked records)."""
        result = _result(await self.run(["agent", "list"]), "agent list", "agent_list")
        found = result.get("agents")
        if not isinstance(found, list):
            raise _malformed("agent list", "no agents list")
        return [_agent_record(item, "agent list") for item in found]

    async def locate(self, terminal_id: str, alias: str) -> dict[str, Any]:
        """The listed agent on ``terminal_id``: ``not_running`` when Herdr lists none."""
        matches = [a for a in await self.agents() if a["terminal_id"] == terminal_id]
        if not matches:
            raise TetherError(ErrorCode.NOT_RUNNING, (
                f"Herdr lists no agent on the terminal of target {alias!r} (its program ended, "
                "or it runs no agent Herdr recognises); nothing was sent"),
                {"input_sent": False, "target": alias})
        if len(matches) > 1:
            raise TetherError(ErrorCode.HERDR_TARGET_MISMATCH, (
                f"Herdr lists {len(matches)} agents on the terminal of target {alias!r}; its "
                "identity is ambiguous, so nothing was sent"),
                {"input_sent": False, "target": alias})
        return matches[0]

    async def get(self, pane: str) -> dict[str, Any]:
        answer = await self.run(["agent", "get", pane])
        return _agent_record(_result(answer, "agent get", "agent_info").get("agent"),
                             "agent get")

    async def read(self, pane: str, lines: int) -> str:
        answer = await self.run(["agent", "read", pane, "--source", "recent",
                                 "--lines", str(lines)])
        _check_status(answer, "agent read", sends_input=False)
        return answer.stdout.decode("utf-8", errors="replace")

    async def explain(self, pane: str) -> dict[str, Any]:
        answer = await self.run(["agent", "explain", pane, "--json"])
        _check_status(answer, "agent explain", sends_input=False)
        explained = _json(answer.stdout, "agent explain")
        if not isinstance(explained, dict):
            raise _malformed("agent explain", "not a JSON object")
        return explained

    async def wait(self, pane: str, until: Sequence[str], timeout_ms: int
                   ) -> dict[str, Any] | None:
        """``agent wait``: the agent once its state is one of ``until``; None when Herdr's
        own timeout came first."""
        args = ["agent", "wait", pane]
        for state in until:
            args += ["--until", state]
        answer = await self.run([*args, "--timeout", str(timeout_ms)])
        if answer.status == 1 and _error_code(answer.stderr) == "timeout":
            return None
        return _agent_record(_result(answer, "agent wait", "agent_info").get("agent"),
                             "agent wait")

    async def prompt(self, pane: str, text: str) -> dict[str, Any]:
        """``agent prompt``: Herdr's acknowledgement that it submitted text and Enter."""
        answer = await self.run(["agent", "prompt", pane, text], sends_input=True)
        result = _result(answer, "agent prompt", "agent_prompted", sends_input=True)
        try:
            return _agent_record(result.get("agent"), "agent prompt")
        except TetherError as err:
            err.data["input_sent"] = "unknown"  # acknowledged, but of what is not clear
            raise


def wait_timeout_ms(requested_ms: int, remaining_ms: int) -> int:
    """A wait's ``--timeout``: what was asked, cut to what the deadline leaves (less the
    margin Herdr's own timeout answer needs)."""
    margin = min(remaining_ms // 2, max(WAIT_MARGIN_MS, remaining_ms // 4))
    return max(0, min(requested_ms, remaining_ms - margin))


def check_identity(record: dict[str, Any], terminal_id: str, alias: str, command: str, *,
                   input_sent: bool | str = False) -> None:
    """Refuse an answer about another terminal than the binding's."""
    if record["terminal_id"] != terminal_id:
        raise TetherError(ErrorCode.HERDR_TARGET_MISMATCH, (
            f"Herdr's answer to {command} is about another terminal than target {alias!r}'s "
            "(the pane's occupant changed)"
            + ("; the prompt may have reached that other terminal, and it was not sent again"
               if input_sent is not False else "; nothing of it is shown")),
            {"input_sent": input_sent, "target": alias})


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """An agent record as the Agent tool shows it: state and description, no identities."""
    shown: dict[str, Any] = {"status": record["agent_status"]}
    for name in _AGENT_TEXT:
        value = record.get(name)
        if isinstance(value, str):
            shown[name] = value[:_MAX_FIELD_CHARS]
    for name in _AGENT_FLAGS:
        if isinstance(record.get(name), bool):
            shown[name] = record[name]
    for name in _AGENT_COUNTS:
        value = record.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            shown[name] = value
    return shown


# -- answers ------------------------------------------------------------------------------------


async def _drain(stream: asyncio.StreamReader, limit: int, name: str) -> bytes:
    buffer = bytearray()
    while chunk := await stream.read(65536):
        buffer += chunk
        if len(buffer) > limit:
            raise _Overflow(name, limit)
    return bytes(buffer)


def _json(raw: bytes, command: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _malformed(command, "not JSON") from None


def _malformed(command: str, what: str, input_sent: bool | str = False) -> TetherError:
    return unavailable("malformed_answer", f"herdr {command} answered something this adapter "
                       f"does not understand ({what}); is the executable Herdr 0.7.5 or later?",
                       input_sent)


def _error_code(stderr: bytes) -> str | None:
    """Herdr's error code from the JSON it prints on stderr, when it is one."""
    try:
        error = json.loads(stderr.decode("utf-8")).get("error")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) and _HERDR_CODE.fullmatch(code) else None


def _check_status(answer: Answer, command: str, *, sends_input: bool) -> None:
    if answer.status == 0:
        return
    code = _error_code(answer.stderr)
    if answer.status == 2:  # Herdr's usage errors: refused before any request
        raise unavailable("usage_error", f"herdr {command} refused its arguments (exit "
                          "status 2): this adapter needs Herdr 0.7.5 or later; nothing was "
                          "sent", False, exit_status=2)
    sent: bool | str = False
    if sends_input and code not in _REFUSED_BEFORE_INPUT:
        sent = "unknown"
    detail: dict[str, Any] = {"exit_status": answer.status}
    if code is not None:
        detail["herdr_code"] = code
    how = (f"was killed by signal {-answer.status}" if answer.status < 0
           else f"failed (exit status {answer.status}"
           + (f", Herdr's code {code})" if code else ")"))
    raise unavailable("exit_status", f"herdr {command} {how}"
                      + ("; whether the prompt was submitted is unknown, and it was not sent "
                         "again" if sent == "unknown" else "; nothing was sent"),
                      sent, **detail)


def _result(answer: Answer, command: str, kind: str, *, sends_input: bool = False
            ) -> dict[str, Any]:
    """The ``result`` of a JSON answer of type ``kind``."""
    _check_status(answer, command, sends_input=sends_input)
    sent: bool | str = "unknown" if sends_input else False
    try:
        value = json.loads(answer.stdout.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _malformed(command, "not JSON", sent) from None
    result = value.get("result") if isinstance(value, dict) else None
    if not isinstance(result, dict) or result.get("type") != kind:
        raise _malformed(command, f"no result of type {kind}", sent)
    return result


def _agent_record(value: Any, command: str) -> dict[str, Any]:
    """An ``AgentInfo`` with the fields identity and state rest on, of the right types."""
    if not isinstance(value, dict):
        raise _malformed(command, "no agent record")
    terminal, pane, status = (value.get(k) for k in ("terminal_id", "pane_id", "agent_status"))
    if not isinstance(terminal, str) or not terminal:
        raise _malformed(command, "an agent record without terminal_id")
    if not isinstance(pane, str) or not PANE_ID.fullmatch(pane):
        raise _malformed(command, "an agent record without a pane_id of the expected form")
    if status not in HERDR_STATES:
        raise _malformed(command, "an agent record without a known agent_status")
    return value
