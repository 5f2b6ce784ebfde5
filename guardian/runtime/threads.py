"""Threads and their main shells: opening, reattaching, resetting, and what a shell reports.

One main shell per thread, at one generation. This module owns the table of shells; it is
the shells' listener, so a finished, discarded or exited command is handed to the finisher
from here and nowhere else.

A shell that ends without a ``reset_shell`` (it exited, its guardian stopped, or its guardian
died) is replaced by the next call that needs one, at generation + 1, in the thread's last
known directory: everything else it held (environment, variables, functions) is gone. That
is said, never silent: the reattaching ``thread.open`` and the first command in the new shell
carry ``shell_replaced`` with the old generation and why it ended. How a shell ended is
written to the thread's row when this guardian sees it end; a guardian that died wrote
nothing, and that silence is what ``guardian_lost`` means.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from tether.guardian.runtime import git_guard, kernel, sandbox
from tether.guardian.runtime.caps import RunningCaps, exhausted
from tether.guardian.runtime.finish import Finisher
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.notify import ChangeNotifier
from tether.guardian.runtime.pty import ExitStatus, NotStarted
from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.shell import MainShell
from tether.guardian.terminal.frames import FRAME_MARK_ENV
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import DEFAULT_COLS, DEFAULT_ROWS
from tether.protocol.methods import ResetShellParams, ThreadOpenParams
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths, ensure_private_dir
from tether.shared.store.catalog import Catalog
from tether.shared.store.rows import ThreadRow
from tether.shared.store.store_errors import STORAGE_ERRORS

log = logging.getLogger(__name__)

#: After SIGHUP at a reset, how long the old shell's processes get before SIGKILL.
RESET_GRACE_S = 1.0

#: Why a thread's shell was replaced without a reset (``ShellReplaced.reason``), and how the
#: notice says it.
SHELL_EXITED = "shell_exited"
GUARDIAN_STOPPED = "guardian_stopped"
GUARDIAN_IDLE_EXIT = "guardian_idle_exit"
GUARDIAN_LOST = "guardian_lost"
_ENDED = {
    SHELL_EXITED: "exited (`exit` typed into it, or its process was killed)",
    GUARDIAN_STOPPED: "ended when its guardian was stopped",
    GUARDIAN_IDLE_EXIT: "ended when its guardian exited after its idle period "
                        "(TETHER_GUARDIAN_IDLE_S)",
    GUARDIAN_LOST: "was lost with its guardian, which died without stopping cleanly",
}


#: An architect shell's git and pagers: no optional index writes (which the sandbox would
#: refuse with a warning), no pager that a repository's config could name. Its ``git`` is
#: git_guard's besides (first on PATH), which overrides every program a config names.
ARCHITECT_ENV = {
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.fsmonitor",
    "GIT_CONFIG_VALUE_0": "false",
    "GIT_CONFIG_KEY_1": "core.pager",
    "GIT_CONFIG_VALUE_1": "cat",
}


class Threads:
    """The threads of this guardian and their main shells (a ``ShellListener``)."""

    def __init__(
        self,
        *,
        scope: Scope,
        catalog: Catalog,
        paths: GuardianPaths,
        clock: Clock,
        finisher: Finisher,
        notifier: ChangeNotifier,
        base_env: dict[str, str],
        mode_sandbox: bool = True,
        caps: RunningCaps | None = None,
        files: bool = True,
    ) -> None:
        self._scope = scope
        #: Whether threads have managed temporary directories (``files``, protocol 1.9; an
        #: older protocol emulated: no TETHER_TMP, no temporary_dir).
        self.files = files
        self._caps = caps or RunningCaps()
        self._catalog = catalog
        self._paths = paths
        self._clock = clock
        self._finisher = finisher
        self._notifier = notifier
        self._base_env = base_env
        self._shells: dict[str, MainShell] = {}
        #: Notices of shells replaced without a reset, until a command runs in the new one.
        self._replaced: dict[str, dict[str, Any]] = {}
        #: The cwd last written to each thread's row (written again when a command moves it).
        self._saved_cwd: dict[str, str] = {}
        #: Why every shell is ending, while this guardian shuts down.
        self._ending: str | None = None
        #: Whether a mode change gives a fresh shell and architect runs sandboxed (an
        #: older protocol emulated: neither), and what the sandbox is on this kernel (or why
        #: there is none).
        self.mode_sandbox = mode_sandbox
        self.sandbox, self.sandbox_missing = sandbox.describe() if mode_sandbox else (None, None)

    # -- opening and resetting -------------------------------------------------------------

    async def open(self, params: ThreadOpenParams) -> dict[str, Any]:
        """Create a thread, or reattach to one; either way its main shell is running."""
        workspace_root = self._scope.workspace_root
        if params.principal != self._scope.principal or params.workspace_root != workspace_root:
            raise TetherError(
                ErrorCode.SESSION_MISMATCH,
                f"this guardian serves {workspace_root!r}, not {params.workspace_root!r}",
            )
        reattached = params.thread_id is not None
        if params.thread_id is None:
            thread = self._catalog.create_thread(
                self._clock.new_id("th"), self._scope.principal, workspace_root
            )
        else:
            found = self._catalog.get_thread(params.thread_id)
            if found is None or found["workspace_root"] != workspace_root:
                raise TetherError(  # an unknown thread, as every other call names it
                    ErrorCode.SESSION_MISMATCH,
                    f"no thread {params.thread_id!r} in this workspace; call Initialize "
                    "without thread_id to start a new one",
                    {"input_sent": False},
                )
            thread = found
        shell = self.ensure_shell(thread)
        opened = {
            "thread_id": thread["thread_id"],
            "workspace_root": workspace_root,
            "reattached": reattached,
            "generation": shell.generation,
            "cwd": shell.cwd,
        }
        if self.files:
            opened["temporary_dir"] = str(self._paths.temporary(thread["thread_id"]))
        if reattached and thread["thread_id"] in self._replaced:
            opened["shell_replaced"] = self._replaced[thread["thread_id"]]
        return opened

    def ensure_shell(self, thread: ThreadRow, *, reset: bool = False) -> MainShell:
        """The thread's live main shell, starting a new generation when there is none.

        A new generation that no reset asked for (``reset``) leaves a notice for the next
        reattach and the next command (:meth:`take_replaced`)."""
        old = self._shells.get(thread["thread_id"])
        if old is not None and old.alive:
            return old
        thread_id = thread["thread_id"]
        replacing = bool(thread["shell_execution_id"]) and not reset
        # Processes of the old shell still running, found before the new one starts any.
        orphans = [{"pid": pid, "reason": "left the old shell's session; still running"}
                   for pid in kernel.processes_marked("TETHER_THREAD_ID", thread_id,
                                                      unless="TETHER_EXECUTION_ID")
                   ] if replacing else []
        # A shell holds a terminal and descriptors like a job does: none is started when the
        # guardian is short of descriptors (it keeps a few to answer with).
        self._caps.check_descriptors()
        generation = int(thread["generation"]) + (1 if thread["shell_execution_id"] else 0)
        sandboxed = self.sandboxed(thread["thread_id"])
        # A directory removed since is not where anyone expects to be: the workspace is.
        cwd = thread["cwd"] if os.path.isdir(thread["cwd"]) else thread["workspace_root"]
        shell = MainShell(
            thread_id=thread["thread_id"],
            generation=generation,
            cwd=cwd,
            env=self.env_for(thread["thread_id"], None, sandboxed=sandboxed,
                             architect=self.architect(thread["thread_id"])),
            scratch=self._paths.scratch,
            rows=DEFAULT_ROWS,
            cols=DEFAULT_COLS,
            listener=self,
            sandboxed=sandboxed,
        )
        try:
            shell.start()
        except NotStarted as exc:
            raise exhausted(exc) or exc from None
        self._shells[thread["thread_id"]] = shell
        # shell_execution_id marks "a shell has run": the next start is a new generation.
        self._catalog.update_thread(
            thread["thread_id"], generation=generation, shell_execution_id=f"shell-{generation}",
            shell_ended=None,
        )
        self._saved_cwd[thread_id] = thread["cwd"]  # written again once a command ends
        self._replaced.pop(thread_id, None)
        if replacing:
            # Ended here a moment ago (its exit not yet handled), or as the row says; a
            # guardian that died said nothing.
            ended = json.loads(thread.get("shell_ended") or "null")
            reason = SHELL_EXITED if old is not None else (
                ended["reason"] if ended and ended.get("generation") == generation - 1
                else GUARDIAN_LOST)
            self._replaced[thread_id] = _notice(generation, reason, shell.cwd, thread["cwd"],
                                                orphans)
        return shell

    def take_replaced(self, thread_id: str) -> dict[str, Any] | None:
        """The notice of the thread's shell replaced without a reset, once (for the first
        command that runs in the new shell)."""
        return self._replaced.pop(thread_id, None)

    def env_for(self, thread_id: str, execution_id: str | None, *,
                sandboxed: bool = False, architect: bool = False) -> dict[str, str]:
        """Environment of every process Tether starts (docs/tools.md#trees-and-parents); an architect
        thread's shell and
        jobs get git_guard's ``git`` first on PATH, with or without the kernel sandbox."""
        # Under the guardian's own environment: the turn watch tells frames apart where a
        # program marks them (terminal/frames), unless its operator chose otherwise.
        env = {**FRAME_MARK_ENV, **self._base_env}
        env.update(
            TERM="xterm-256color",
            TETHER_THREAD_ID=thread_id,
            TETHER_WORKSPACE=self._scope.workspace_root,
        )
        if self.files:
            env["TETHER_TMP"] = str(self.temporary_dir(thread_id))
        if execution_id is not None:
            env["TETHER_EXECUTION_ID"] = execution_id
        if sandboxed or architect:
            env.update(ARCHITECT_ENV)
            real_git = shutil.which("git", path=env.get("PATH", os.defpath))
            if real_git is not None:
                guarded = git_guard.install(str(self._paths.runtime / "architect-bin"),
                                            real_git)
                env["PATH"] = f"{guarded}:{env.get('PATH', os.defpath)}"
        return env

    def temporary_dir(self, thread_id: str) -> Path:
        """The thread's managed temporary directory, made (0700) when it is not there."""
        path = self._paths.temporary(thread_id)
        if not path.is_dir():
            ensure_private_dir(path, what="thread temporary dir")
        return path

    def temporary_path(self, thread_id: str) -> Path:
        """Where the thread's managed temporary directory is (made or not)."""
        return self._paths.temporary(thread_id)

    def architect(self, thread_id: str) -> bool:
        """Is this thread in architect mode (its shells and jobs read-only)?"""
        mode = self._catalog.get_thread_mode(thread_id)
        return mode is not None and mode.get("name") == "architect"

    def sandboxed(self, thread_id: str) -> bool:
        """Do this thread's shells and jobs start inside the architect sandbox?"""
        if self.sandbox is None:
            return False
        return self.architect(thread_id)

    def shell_sandboxed(self, thread_id: str) -> bool | None:
        """Is the thread's live shell sandboxed (None: no live shell here)?"""
        shell = self._shells.get(thread_id)
        return shell.sandboxed if shell is not None and shell.alive else None

    def refuse_if_busy(self, thread_id: str, doing: str) -> None:
        """``shell_busy`` while a command runs in the thread's main shell."""
        shell = self._shells.get(thread_id)
        if shell is not None and shell.alive and shell.busy:
            raise shell.busy_error(
                f"{doing} starts a fresh shell, which would end it. Wait for it (status_check), "
                "interrupt it (send_keys Ctrl-c), or reset_shell first. Nothing was changed.")

    async def reset(self, params: ResetShellParams) -> dict[str, Any]:
        """Replace the main shell: the old one's whole session is ended and reaped, the new
        one is generation + 1. A process of the old shell that survives (or escaped its
        session) is reported as an orphan on the interrupted record, never adopted
        (docs/tools.md#unknown-is-not-success)."""
        return await self.replace_shell(self._scope.thread_for(params))

    async def replace_shell(self, thread: ThreadRow) -> dict[str, Any]:
        """:meth:`reset` of a thread already checked (also a mode change's fresh shell)."""
        thread_id = thread["thread_id"]
        old = self._shells.pop(thread_id, None)
        orphans: list[dict[str, Any]] = []
        if old is not None:
            interrupted, old.current = old.current, None
            if interrupted is not None:
                self._finisher.finish(interrupted, None, reason="shell_reset", status="unknown")
            survivors = await old.runtime.end_session(RESET_GRACE_S)
            orphans = [{"pid": pid, "reason": "survived SIGKILL at shell reset"}
                       for pid in survivors]
            escaped = set(kernel.processes_marked(
                "TETHER_THREAD_ID", thread_id, unless="TETHER_EXECUTION_ID"))
            orphans += [{"pid": pid, "reason": "left the shell's session; still running"}
                        for pid in sorted(escaped - set(survivors))]
            if interrupted is not None and orphans:
                record = self._catalog.get_execution(interrupted.execution_id)
                runtime = (record or {}).get("runtime") or {}
                self._finisher.keep(interrupted.execution_id,
                                    runtime={**runtime, "orphans": orphans})
            old.close()
        shell = self.ensure_shell(thread, reset=True)
        return {"thread_id": thread_id, "generation": shell.generation,
                "cwd": shell.cwd, "orphans": orphans}

    # -- looking up ------------------------------------------------------------------------

    def shell(self, thread_id: str) -> MainShell | None:
        """The thread's main shell in this process, if it has one."""
        return self._shells.get(thread_id)

    def shells(self) -> list[MainShell]:
        """Every live main shell (for parentage by process ancestry, docs/tools.md#trees-and-parents)."""
        return list(self._shells.values())

    def cwd(self, thread_id: str, fallback: str) -> str:
        """The shell's current directory, or ``fallback`` when the thread has no shell here."""
        shell = self._shells.get(thread_id)
        return shell.cwd if shell is not None else fallback

    def any_busy(self) -> bool:
        return any(shell.busy for shell in self._shells.values())

    # -- ShellListener ---------------------------------------------------------------------

    def command_finished(self, live: LiveExecution, exit_code: int | None) -> None:
        shell = self._shells.get(live.thread_id)
        if shell is not None and shell.cwd != self._saved_cwd.get(live.thread_id):
            # A shell that replaces this one after a crash starts where this one was: written
            # before the reply (a commit on the path of the rare command that changes
            # directory), so that a client that saw the new cwd finds it after a crash.
            self._saved_cwd[live.thread_id] = shell.cwd
            self._remember_end(shell, None)
        # The shell's screen lives on: its text is written just after the end is answered.
        defer = shell.defer_draw if shell is not None and shell.screen is live.screen else None
        self._finisher.finish(live, exit_code, defer_screen=defer)

    def marker_ignored(self, live: LiveExecution, detail: str) -> None:
        """A marker the kernel did not confirm: kept as an event of the execution."""
        log.warning("execution %s: %s", live.execution_id, detail)
        try:
            self._catalog.add_execution_event(live.execution_id, "marker_ignored", detail)
        except STORAGE_ERRORS as exc:  # the PTY reader must not die on a full disk
            log.warning("could not record that event: %s", exc)

    def command_discarded(self, live: LiveExecution) -> None:
        self._finisher.finish(live, None, reason="discarded_before_start", status="unknown")

    def shell_exited(self, shell: MainShell, status: ExitStatus) -> None:
        if self._shells.get(shell.thread_id) is shell:
            del self._shells[shell.thread_id]
            self._remember_end(shell, self._ending or SHELL_EXITED)
        if shell.current is not None:
            # `exit 3` typed as a command: the shell's exit is that command's exit.
            self._finisher.finish(shell.current, status.shell_style_code, reason="shell_exited")
            shell.current = None
        shell.close()
        self._notifier.notify()

    def _remember_end(self, shell: MainShell, reason: str | None) -> None:
        """Best effort: the next generation starts in this shell's cwd, and says why this one
        ended (``reason``; None: it has not) (a full disk must not stop an exit)."""
        fields: dict[str, Any] = {"cwd": shell.cwd}
        if reason is not None:
            fields["shell_ended"] = json.dumps({"generation": shell.generation, "reason": reason})
        try:
            self._catalog.update_thread(shell.thread_id, **fields)
        except STORAGE_ERRORS as exc:
            log.warning("could not remember the cwd of thread %s: %s", shell.thread_id, exc)

    def output_arrived(self) -> None:
        self._notifier.notify_output()

    # -- live upgrade (docs/protocol.md#live-upgrade) --------------------------------------

    def handover(self) -> dict[str, Any]:
        """What lives only here besides the shells themselves: the notices of shells
        replaced without a reset, and the cwd last written to each thread's row."""
        return {"replaced": dict(self._replaced), "saved_cwd": dict(self._saved_cwd)}

    def adopt(self, handed: dict[str, Any], shells: list[dict[str, Any]]) -> list[MainShell]:
        """The main shells the code before a live upgrade ran, taken over (their processes
        adopted, their commands' executions attached by the caller)."""
        self._replaced.update(handed["replaced"])
        self._saved_cwd.update(handed["saved_cwd"])
        adopted = []
        for state in shells:
            thread_id = state["thread_id"]
            shell = MainShell(
                thread_id=thread_id, generation=int(state["generation"]), cwd=state["cwd"],
                env={}, scratch=self._paths.scratch, rows=int(state["runtime"]["rows"]),
                cols=int(state["runtime"]["cols"]), listener=self,
                sandboxed=bool(state["sandboxed"]), handed=state)
            shell.adopt(state, None)
            self._shells[thread_id] = shell
            adopted.append(shell)
        return adopted

    # -- shutdown --------------------------------------------------------------------------

    def hangup_all(self, reason: str = GUARDIAN_STOPPED) -> None:
        """Hang up every shell: this guardian stops (``reason``: why, for the next one)."""
        self._ending = reason
        for shell in self._shells.values():
            shell.runtime.hangup()

    def close_all(self) -> None:
        """Remember each shell's cwd and why it ended, and close it (guardian shutdown)."""
        for shell in list(self._shells.values()):
            self._remember_end(shell, self._ending or GUARDIAN_STOPPED)
            shell.close()
        self._shells.clear()


def _notice(generation: int, reason: str, cwd: str, saved: str,
            orphans: list[dict[str, Any]]) -> dict[str, Any]:
    """``ShellReplaced``: a shell of ``generation`` replaced the one before, which ended for
    ``reason``; it started in ``cwd``: the old shell's directory ``saved``, or the workspace
    when that directory is gone."""
    where = cwd if cwd == saved else f"{cwd} ({saved} is gone)"
    message = (f"This thread's shell was replaced: the shell of generation {generation - 1} "
               f"{_ENDED.get(reason, reason)}, and a new shell (generation {generation}) "
               f"started. Its working directory is restored to {where}; environment "
               "variables, shell variables, functions and aliases set in the old shell are "
               "gone. Set up again what later commands rely on.")
    if orphans:
        message += (f" Processes of the old shell still running (not adopted): "
                    f"{', '.join(str(o['pid']) for o in orphans)}.")
    notice: dict[str, Any] = {"previous_generation": generation - 1, "generation": generation,
                              "reason": reason, "cwd": cwd, "message": message}
    if orphans:
        notice["orphans"] = orphans
    return notice


def process_env() -> dict[str, str]:
    """The guardian's environment, minus what must not leak into user shells."""
    env = dict(os.environ)
    for name in ("TETHER_EXECUTION_ID",):
        env.pop(name, None)
    return env
