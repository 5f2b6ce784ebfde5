"""Why a live guardian does not answer, in words a person can act on.

A guardian whose identity checks out (same pid, create time and boot, docs/protocol.md#identity) but that
does not
answer is ``guardian_unresponsive``: stopped (SIGSTOP, Ctrl-Z), overloaded, or unreachable
because its socket file is gone. That is different from ``guardian_start_failed`` (a start
was attempted and failed) and calls for a different remedy; nothing is started either way.
"""

from __future__ import annotations

import contextlib
import shlex
from typing import Any

import psutil

from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.paths import GuardianPaths
from tether.shared.ssh_target import RemoteWorkspace, is_remote


def restart_command(workspace_root: str, principal: str = "local") -> str:
    """The exact command that replaces (and so upgrades) the guardian of ``workspace_root``
    for ``principal``: what every message that advises a restart quotes."""
    who = "" if principal == "local" else f" --principal {shlex.quote(principal)}"
    where = ""
    if is_remote(workspace_root):  # run on the host, where the guardian is
        with contextlib.suppress(TetherError):
            remote = RemoteWorkspace.parse(workspace_root)
            where, workspace_root = f" --host {shlex.quote(remote.host.name)}", remote.path
    return (f"tether guardians restart{where} --workspace {shlex.quote(workspace_root)}{who} "
            "--yes")


def upgrade_command(workspace_root: str, principal: str = "local") -> str:
    """The command that hands the guardian of ``workspace_root`` over to the installed code,
    keeping its terminals (docs/protocol.md#live-upgrade)."""
    who = "" if principal == "local" else f" --principal {shlex.quote(principal)}"
    return f"tether guardians upgrade --workspace {shlex.quote(workspace_root)}{who}"


def upgrade_for(info: dict[str, Any], workspace_root: str | None = None) -> str:
    """:func:`upgrade_command` for the guardian described by its ``guardian.json``."""
    root = workspace_root or str(info.get("workspace_root") or "?")
    return upgrade_command(root, str(info.get("principal") or "local"))


def restart_for(info: dict[str, Any], workspace_root: str | None = None) -> str:
    """:func:`restart_command` for the guardian described by its ``guardian.json``."""
    root = workspace_root or str(info.get("workspace_root") or "?")
    return restart_command(root, str(info.get("principal") or "local"))


def stat_state(stat: bytes) -> str:
    """The state letter of a ``/proc/<pid>/stat`` line (``R``, ``S``, ``T`` stopped, ...):
    the field after the command name, which is in parentheses and may hold any byte."""
    end = stat.rfind(b")")
    return stat[end + 2:end + 3].decode("ascii", "replace") if end >= 0 else "?"


def is_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (SIGSTOP, Ctrl-Z): alive, but it cannot answer anything."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat_state(stat.read(512)) == "T"
    except OSError:
        return process_status(pid) == psutil.STATUS_STOPPED  # no /proc (not Linux), or gone


def stopped(info: dict[str, Any], workspace_root: str | None = None) -> TetherError:
    """``guardian_unresponsive`` for a guardian seen stopped before anything was sent to it:
    said at once (a request would only wait out its deadline), with both remedies."""
    pid = int(info["pid"])
    root = workspace_root or str(info.get("workspace_root") or "?")
    return TetherError(
        ErrorCode.GUARDIAN_UNRESPONSIVE,
        f"the guardian of {root} (guardian pid {pid}) is stopped (SIGSTOP or Ctrl-Z), so it "
        "cannot answer. Nothing was sent, and no other guardian was started. "
        f"`kill -CONT {pid}` resumes it, or `{restart_for(info, root)}` replaces it (its "
        "running terminals end; their records stay readable).",
        {"pid": pid, "process_status": psutil.STATUS_STOPPED, "input_sent": False,
         "operator_action_required": True},
    )


def process_status(pid: int) -> str:
    """psutil's status of ``pid`` (``stopped``, ``running``, ``sleeping``...), or ``gone``."""
    try:
        return str(psutil.Process(pid).status())
    except psutil.Error:
        return "gone"


def unresponsive(paths: GuardianPaths, info: dict[str, Any], workspace_root: str, *,
                 waited_s: float, input_sent: bool | str = False) -> TetherError:
    """``guardian_unresponsive`` for the guardian described by ``info``, naming the likely
    cause and what to do about it."""
    pid = int(info["pid"])
    status = process_status(pid)
    socket_present = paths.socket.exists()
    if status == psutil.STATUS_STOPPED:
        cause = f"it is stopped (SIGSTOP or Ctrl-Z); resume it with `kill -CONT {pid}`"
    elif not socket_present:
        cause = (f"its socket {paths.socket} is missing; a guardian re-creates it within a "
                 "second, so try again")
    else:
        cause = "it may be overloaded or hung; try again shortly"
    sent = "Nothing was sent" if input_sent is False else "Whether the input arrived is unknown"
    return TetherError(
        ErrorCode.GUARDIAN_UNRESPONSIVE,
        f"the guardian of {workspace_root} (pid {pid}) is alive but did not answer within "
        f"{waited_s:g}s: {cause}. {sent}, and no other guardian was started. If it stays "
        f"unresponsive, `{restart_for(info, workspace_root)}` replaces it (its running "
        "terminals end; their records stay readable).",
        {"pid": pid, "process_status": status, "socket_present": socket_present,
         "input_sent": input_sent, "operator_action_required": True, "waited_s": waited_s},
    )


def measured(err: TetherError, paths: GuardianPaths, info: dict[str, Any], workspace_root: str,
             *, waited_s: float) -> TetherError:
    """``err`` restated with the wait a caller measured, when it is ``guardian_unresponsive``.

    The locator states the longest a handshake may wait (its timeout plus the reply grace),
    but a stopped guardian never completes the socket's handshake, so sending gives up sooner
    (after about 2s): "did not answer within 5s" said after 2s would make a person doubt the
    rest of the message.
    """
    if err.code != ErrorCode.GUARDIAN_UNRESPONSIVE or "waited_s" not in err.data:
        return err  # not unresponsive, or refused before anything was sent (:func:`stopped`)
    return unresponsive(paths, info, workspace_root, waited_s=round(waited_s, 1),
                        input_sent=err.data.get("input_sent", False))
