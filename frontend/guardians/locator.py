"""Finding, starting and validating the guardian of a workspace (docs/protocol.md#guardians-one-per-key,
docs/protocol.md#identity, docs/protocol.md#finding-a-guardian-and-recovery).

The front-end keeps nothing on disk of its own. For a workspace it reads ``guardian.json``,
checks the process identity (pid + create time + boot id), and handshakes. When the
guardian is gone it starts a new one, under a start lock so that racing front-ends end up
with one guardian; the new guardian marks the records its predecessor left running
``unknown`` (``guardian_lost``) before it answers, and says which in its ``hello``. The
front-end never writes a catalog: it only reads one, to refuse an unknown thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import filelock
from pydantic import ValidationError

from tether.frontend import usage
from tether.frontend.guardians.health import (
    is_stopped,
    restart_for,
    stat_state,
    stopped,
    unresponsive,
    upgrade_for,
)
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_CANONICAL_LINE_BYTES, long_line
from tether.protocol.method_table import HELLO, Method
from tether.protocol.methods import Params, params_capability
from tether.protocol.results import HelloResult, Result
from tether.protocol.transport import REPLY_GRACE_S, GuardianClient
from tether.protocol.versions import MAJOR, Capability, Version, known_minor_versions, minor_introducing
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths, guardian_paths
from tether.shared.ssh_target import RemoteWorkspace, is_remote
from tether.shared.store.rows import PeekedThread
from tether.shared.store.store_errors import StoreError
from tether.shared.store.view import peek_thread

if TYPE_CHECKING:
    from tether.frontend.guardians.remote import RemoteGuardians

log = logging.getLogger(__name__)

START_TIMEOUT_S = 15.0
HELLO_TIMEOUT_S = 3.0
#: While a guardian hands itself over to new code: how long a call is sent again, and how
#: often (docs/protocol.md#live-upgrade).
UPGRADE_WAIT_S = 30.0
UPGRADE_RETRY_S = 0.01
UPGRADE_RECHECK_S = 1.0

P = TypeVar("P", bound=Params)
R = TypeVar("R", bound=Result)


class Liveness:
    """Whether one guardian process still runs, asked before every call to it.

    Reading its identity from ``/proc`` (``ProcessIdentity.alive``: two reads of
    ``/proc/<pid>/stat`` and one of ``/proc/stat``) costs tens of microseconds per call. A
    pidfd opened once, while the identity is known to match, refers to that very process
    (never to a later one with its pid) and turns readable when it ends, zombie or reaped:
    polling it is one system call. Without pidfds (not Linux, or a kernel before 5.3) the
    identity is read every time, as before.
    """

    def __init__(self, identity: ProcessIdentity) -> None:
        self.identity = identity
        self._fd: int | None = None
        self._stat: int | None = None
        self._poll: select.poll | None = None
        self._watch: asyncio.AbstractEventLoop | None = None
        try:
            fd = os.pidfd_open(identity.pid)
        except (AttributeError, OSError):
            return
        try:
            # Its state (stopped or not) is one pread of this descriptor, about 7 us: it
            # refers to this very process too, and reads fail once the process is gone.
            stat: int | None = os.open(f"/proc/{identity.pid}/stat", os.O_RDONLY)
        except OSError:
            stat = None
        # Checked after both exist: had the pid been reused before, the create time would
        # not match, so descriptors kept here are the guardian's own.
        if not identity.alive():
            os.close(fd)
            if stat is not None:
                os.close(stat)
            return
        self._fd = fd
        self._stat = stat
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    def alive(self) -> bool:
        if self._poll is None:
            return self.identity.alive()
        return not self._poll.poll(0)

    def stopped(self) -> bool:
        """Whether the process is stopped (SIGSTOP, Ctrl-Z): alive, but nothing sent to it
        would be answered before it is continued."""
        if self._stat is None:
            return is_stopped(self.identity.pid)
        try:
            return stat_state(os.pread(self._stat, 512, 0)) == "T"
        except OSError:
            return False  # gone: alive() says so

    def on_exit(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, from ``loop``, when the process ends (nothing without a
        pidfd: callers then find out at their deadline, as before)."""
        fd = self._fd
        if fd is None or self._watch is not None:
            return

        def ended() -> None:
            loop.remove_reader(fd)
            callback()

        loop.add_reader(fd, ended)
        self._watch = loop

    def close(self) -> None:
        if self._watch is not None and self._fd is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed already
                self._watch.remove_reader(self._fd)
        self._watch = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._poll = None
        if self._stat is not None:
            os.close(self._stat)
            self._stat = None


@dataclass
class GuardianHandle:
    """A handshaken connection to one guardian instance."""

    paths: GuardianPaths
    info: dict[str, Any]
    identity: ProcessIdentity  # from ``info``, checked when the handle was made
    client: GuardianClient
    version: Version
    capabilities: frozenset[str]
    #: The records the guardian's predecessor left running, which it reconciled at start
    #: (its ``hello``), told by the front-end that started it (``Initialize``).
    reconciled: list[dict[str, Any]] = field(default_factory=list)
    lost_records: list[dict[str, Any]] = field(default_factory=list)
    #: Opened on the first check: a handle only looked at (``tether ls``) holds no pidfd.
    liveness: Liveness | None = None
    #: guardian.json's modification time when this handle handshook: a guardian that
    #: upgraded itself since (docs/protocol.md#live-upgrade) wrote it again.
    info_mtime_ns: int = 0

    @property
    def instance_id(self) -> str:
        return str(self.info["instance_id"])

    def alive(self) -> bool:
        """This very guardian process still runs (pid, create time and boot, never a pid
        alone)."""
        if self.liveness is None:
            self.liveness = Liveness(self.identity)
        return self.liveness.alive()

    def watch_exit(self) -> None:
        """Fail this guardian's waiting calls the moment its process ends, instead of at their
        deadlines (up to a command's wait plus grace): a crash is seen at once, and reads are
        retried on the guardian that replaces it (GuardianLocator.call)."""
        if self.liveness is None:
            self.liveness = Liveness(self.identity)
        pid = self.identity.pid
        self.liveness.on_exit(asyncio.get_running_loop(), lambda: self.client.fail_pending(
            lambda: TetherError(ErrorCode.GUARDIAN_UNAVAILABLE,
                                f"the guardian (pid {pid}) exited while this call waited for it",
                                {"input_sent": "unknown"})))

    def close(self) -> None:
        self.client.close()
        if self.liveness is not None:
            self.liveness.close()

    def stopped(self) -> bool:
        """This guardian is stopped (SIGSTOP, Ctrl-Z): whatever is sent would wait out its
        deadline unanswered."""
        if self.liveness is None:
            self.liveness = Liveness(self.identity)
        return self.liveness.stopped()

    @property
    def can_hand_over(self) -> bool:
        """This guardian can hand itself over to the installed code (docs/protocol.md#live-upgrade):
        it advertises ``live_upgrade``, or it is of a build that serves ``guardian.upgrade``
        whatever protocol it was told to speak (such a build names its code in guardian.json)."""
        return str(Capability.LIVE_UPGRADE) in self.capabilities or bool(
            self.info.get("code_version"))

    @property
    def workspace_root(self) -> str:
        return str(self.info.get("workspace_root") or self.paths.runtime)

    def unresponsive(self, *, waited_s: float, input_sent: bool | str) -> TetherError:
        """``guardian_unresponsive`` for this guardian: alive, and silent for ``waited_s``."""
        return unresponsive(self.paths, self.info, self.workspace_root, waited_s=waited_s,
                            input_sent=input_sent)

    def require(self, capability: Capability | None, why: str = "", advice: str = "",
                **data: Any) -> None:
        """Refuse, before sending anything, a call this guardian cannot serve
        (docs/protocol.md#versions-and-capabilities). ``why``
        says what of the call needs ``capability`` when the method alone does not, and
        ``advice`` what the caller can do short of an upgrade."""
        if capability is None or str(capability) in self.capabilities:
            return
        since = minor_introducing(capability)
        if self.can_hand_over:
            how = (f"To upgrade, run `{upgrade_for(self.info, self.workspace_root)}`: the "
                   "guardian hands itself over to the installed code and keeps every terminal "
                   f"(`{restart_for(self.info, self.workspace_root)}` would replace it and end "
                   "them).")
        else:
            how = (f"To upgrade, run `{upgrade_for(self.info, self.workspace_root)}`: this "
                   "guardian is too old to hand itself over, so it says what a restart would "
                   f"end before `{restart_for(self.info, self.workspace_root)}` stops it "
                   "(its running terminals end; their records stay readable).")
        raise TetherError(
            ErrorCode.CAPABILITY_MISSING,
            f"{why}The guardian for this workspace speaks protocol {self.version}, which lacks "
            f"'{capability}' (added in protocol {since}). Nothing was sent. {advice}{how}",
            {
                "capability": str(capability),
                "guardian_protocol": str(self.version),
                "input_sent": False,
                "operator_action_required": True,
                **data,
            },
        )

    def admit(self, method: Method[Any, Any], params: dict[str, Any]) -> None:
        """Every refusal due before ``method`` is sent: a capability the method or its params
        need (docs/protocol.md#versions-and-capabilities), and a guardian that is stopped (it could not
        answer)."""
        self.require(method.capability)
        needed = params_capability(method.name, params)
        self.require(needed, "A detection page, or a recognizer's event, is a recognition "
                     "verdict. " if needed == Capability.RECOGNITION else "")
        text = params.get("text") if method.types_text else None
        if isinstance(text, str) and Capability.LINE_LIMITS not in self.capabilities and (
                found := long_line(text)) is not None:
            # Without line_limits the guardian cannot say whether the program reads whole
            # lines, where the kernel would cut this one silently: refused here, whatever
            # the terminal's mode (a shorter line goes through as before).
            line, size = found
            self.require(
                Capability.LINE_LIMITS,
                f"Line {line} of the text is {size} bytes in UTF-8. A program that reads whole "
                f"lines (terminal in cooked mode) takes at most {MAX_CANONICAL_LINE_BYTES} "
                "bytes a line, and the kernel drops the rest silently; only a guardian with "
                "'line_limits' can tell whether this terminal reads whole lines. ",
                f"Send lines of at most {MAX_CANONICAL_LINE_BYTES} bytes (or write the text "
                "to a file and have the program read it). ",
                limit=MAX_CANONICAL_LINE_BYTES, size=size, line=line)
        if self.stopped():
            raise stopped(self.info, self.workspace_root)

    async def call(self, method: Method[P, R], params: dict[str, Any], *,
                   timeout_s: float) -> R:
        """Call ``method`` with its params as a wire map (the guardian validates them against
        ``method.params``: a model built here as well would check every call twice); the
        reply comes back as ``method.result``, checked."""
        try:
            self.admit(method, params)
        except TetherError as err:
            # A guardian that upgraded itself since the handshake has what it lacked then.
            if err.code != ErrorCode.CAPABILITY_MISSING or not await self.refresh():
                raise
            self.admit(method, params)
        name = method.name
        resendable = method.read_only or "idempotency_key" in params or "prompt_id" in params
        if method.checker_built():
            return method.read(await self.client.call(name, params, timeout_s=timeout_s,
                                                      resendable=resendable))
        # The first reply of this kind: its model's validator is built while the guardian
        # works on the request (1-2 ms once per method, which came on top of the call).
        sent = asyncio.ensure_future(self.client.call(name, params, timeout_s=timeout_s,
                                                      resendable=resendable))
        try:
            await asyncio.sleep(0)  # the request goes out
            method.build_checker()
            return method.read(await sent)
        except BaseException:
            sent.cancel()  # a caller cancelled meanwhile leaves no call behind
            raise


    async def refresh(self) -> bool:
        """Handshake again if this guardian re-executed itself with new code since
        (docs/protocol.md#live-upgrade: the same process, instance and token, a guardian.json
        written again): True when it did and this handle now has its new version and
        capabilities. One ``stat`` when nothing changed."""
        try:
            mtime = self.paths.info.stat().st_mtime_ns
        except OSError:
            return False
        if mtime == self.info_mtime_ns:
            return False
        info = read_info(self.paths)
        if info is None or info["instance_id"] != self.info["instance_id"]:
            return False
        try:
            hello = await self.client.call(
                HELLO.name, {"client_min": [MAJOR, 0],
                             "client_max": list(known_minor_versions()[-1])},
                timeout_s=HELLO_TIMEOUT_S, resendable=True)
            greeting = HelloResult.model_validate(hello)
        except (TetherError, ValidationError):
            return False  # not answering yet: the call goes on as it would have
        if greeting.instance_id != self.info["instance_id"]:
            return False
        self.info_mtime_ns = mtime
        self.info = info
        self.version = Version(*greeting.version)
        self.client.version = self.version
        changed = frozenset(greeting.capabilities) != self.capabilities
        self.capabilities = frozenset(greeting.capabilities)
        return changed


async def ask(client: GuardianClient, method: Method[P, R], params: dict[str, Any], *,
              timeout_s: float) -> R:
    """Call ``method`` on a bare client (no handshake, no capability check: a person's
    ``tether guardians`` asking a guardian to stop); the reply as ``method.result``."""
    return method.read(await client.call(method.name, params, timeout_s=timeout_s,
                                         resendable=method.read_only))


class GuardianLocator:
    """Connections to guardians, one per workspace, re-validated when a call fails."""

    def __init__(self, config: Config, principal: str = "local") -> None:
        self.config = config
        self.principal = principal
        self._handles: dict[str, GuardianHandle] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Guardians we started are our children until they exit: reap them (no zombies).
        self._children: list[subprocess.Popen[bytes]] = []
        self._remote: RemoteGuardians | None = None

    def remote(self) -> RemoteGuardians:
        """This locator's SSH links (docs/hosts.md#remote-workspaces), made on first use."""
        if self._remote is None:
            from tether.frontend.guardians.remote import RemoteGuardians

            self._remote = RemoteGuardians(self.config, self.principal)
        return self._remote

    async def handle(self, workspace_root: str, thread_id: str | None = None) -> GuardianHandle:
        """A live, handshaken guardian for ``workspace_root`` (canonical), starting one if needed.

        With ``thread_id``, no guardian is started for a thread that no catalog of this
        workspace knows (``session_mismatch``): a refused call leaves nothing running.
        """
        handle = await self._locate(workspace_root, thread_id, start=True)
        assert handle is not None
        return handle

    async def live(self, workspace_root: str) -> GuardianHandle | None:
        """The workspace's live guardian, or None; never starts one (read-only callers)."""
        return await self._locate(workspace_root, None, start=False)

    async def _locate(self, workspace_root: str, thread_id: str | None, *,
                      start: bool) -> GuardianHandle | None:
        handle = self._handles.get(workspace_root)
        if handle is not None and handle.alive():
            return handle  # the common case: no lock, no waitpid, one poll of a pidfd
        # Guardians we started and that have ended are reaped here, off the common path:
        # one that ends is noticed (and reaped) by the next call that finds it gone.
        self._children = [child for child in self._children if child.poll() is None]
        lock = self._locks.setdefault(workspace_root, asyncio.Lock())
        async with lock:
            handle = self._handles.get(workspace_root)
            if handle is not None:
                if handle.alive():
                    return handle
                self.forget(workspace_root)
            found = await self._connect(workspace_root, thread_id, start=start)
            if found is not None:
                found.watch_exit()
                self._handles[workspace_root] = found
            return found

    async def call(
        self, workspace_root: str, method: Method[P, R], params: dict[str, Any], *,
        timeout_s: float,
    ) -> R:
        """Call a guardian method; on a lost guardian, re-locate and retry reads once."""
        thread_id = params.get("thread_id")
        with usage.phase("admission"):
            handle = await self.handle(workspace_root, thread_id)
        try:
            with usage.phase(usage.phase_for_method(method)):
                return await self._upgrade_aware(handle, method, params, timeout_s)
        except TetherError as err:
            if err.code not in (ErrorCode.GUARDIAN_UNAVAILABLE, ErrorCode.WRONG_GUARDIAN):
                raise
            if err.data.get("connection_lost"):
                if self._handles.get(workspace_root) is handle:
                    self.forget(workspace_root)  # (another call may have replaced it already)
                return await self._after_lost(workspace_root, thread_id, method, params,
                                              timeout_s=timeout_s, lost=err)
            sent = err.data.get("input_sent")
            if (err.code == ErrorCode.GUARDIAN_UNAVAILABLE and sent is not False
                    and handle.alive()):
                # Sent, not answered, and the very same process is still there: stopped
                # meanwhile, or overloaded. A new handshake would wait in vain, and nothing is
                # to be started; whether input arrived is unknown, as the error said.
                raise handle.unresponsive(waited_s=timeout_s + REPLY_GRACE_S,
                                          input_sent=False if method.read_only else
                                          sent if sent is not None else "unknown") from None
            # Retry on the (possibly new) guardian only what cannot deliver input twice:
            # reads, and requests that provably never reached a guardian.
            if not method.read_only and sent is not False:
                raise
            self.forget(workspace_root)
            handle = await self.handle(workspace_root, thread_id)
            return await handle.call(method, params, timeout_s=timeout_s)

    async def _after_lost(self, workspace_root: str, thread_id: str | None,
                          method: Method[P, R], params: dict[str, Any], *, timeout_s: float,
                          lost: TetherError) -> R:
        """A call whose connection dropped before its answer came (an SSH link): reads are
        asked again on a new connection; a request with an idempotency key is repeated once
        with the same key, which the guardian never delivers twice (it answers with the first
        outcome, or ``delivery_unknown`` while that delivery is still under way); anything
        else is reported as delivered or not, unknown (docs/hosts.md#when-the-network-fails)."""
        host = lost.data.get("host", "?")
        repeatable = method.read_only or "idempotency_key" in params
        if not repeatable:
            raise _delivery_unknown(method, host, "it is not repeated: ask what happened "
                                    "(BashCommand status_check, Execution list)")
        try:
            handle = await self.handle(workspace_root, thread_id)
            return await handle.call(method, params, timeout_s=timeout_s)
        except TetherError as again:
            if method.read_only:
                raise
            unreached = (ErrorCode.HOST_UNREACHABLE, ErrorCode.GUARDIAN_UNAVAILABLE,
                         ErrorCode.GUARDIAN_UNRESPONSIVE, ErrorCode.GUARDIAN_START_FAILED)
            if again.code == ErrorCode.DELIVERY_UNKNOWN:
                raise _delivery_unknown(
                    method, host, "the guardian had it: repeated with the same idempotency "
                    "key, it was not delivered again, and it is still being carried out or "
                    "ended unseen. Ask what happened (BashCommand status_check, Execution "
                    "list)", key=params.get("idempotency_key")) from None
            if again.code in unreached:
                raise _delivery_unknown(
                    method, host, f"repeating it failed too ({again.code}: {again.message})",
                    key=params.get("idempotency_key")) from None
            raise  # the guardian's own answer to the repeat (a refusal that typed nothing)

    def remote_roots(self) -> list[str]:
        """The ``ssh://`` workspaces this locator is connected to now (docs/hosts.md#a-fleet-seen-as-one)."""
        return [root for root, handle in self._handles.items()
                if is_remote(root) and handle.alive()]

    async def _upgrade_aware(self, handle: GuardianHandle, method: Method[P, R],
                             params: dict[str, Any], timeout_s: float) -> R:
        """:meth:`GuardianHandle.call`, sent again while the guardian hands itself over to
        new code (``guardian_upgrading``, docs/protocol.md#live-upgrade) when that cannot
        deliver twice: a read, a request refused before it did anything, or one whose
        idempotency key (or prompt id) replays what it delivered."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + UPGRADE_WAIT_S
        while True:
            announced = _mtime_ns(handle.paths.info)
            try:
                return await handle.call(method, params, timeout_s=timeout_s)
            except TetherError as err:
                # Nobody listened for a moment: the guardian's old code has closed its socket
                # and the new one is starting (its handover document is still there).
                between = (err.code == ErrorCode.GUARDIAN_UNAVAILABLE
                           and err.data.get("input_sent") is False
                           and handle.paths.handover.exists() and handle.alive())
                if (err.code != ErrorCode.GUARDIAN_UPGRADING and not between) or (
                        loop.time() >= give_up):
                    raise
                replays = "idempotency_key" in params or "prompt_id" in params
                if not (method.read_only or err.data.get("input_sent") is False or replays):
                    raise
            # Sent again once the new code has announced itself (a request sent while the
            # old code closes its socket would be lost with it), or after a while (an
            # upgrade that failed: the guardian serves on).
            again = min(give_up, loop.time() + UPGRADE_RECHECK_S)
            while _mtime_ns(handle.paths.info) == announced and loop.time() < again:
                await asyncio.sleep(UPGRADE_RETRY_S)
            await handle.refresh()

    def forget(self, workspace_root: str) -> None:
        handle = self._handles.pop(workspace_root, None)
        if handle is not None:
            handle.close()

    def close(self) -> None:
        for root in list(self._handles):
            self.forget(root)
        if self._remote is not None:
            self._remote.close()

    async def existing(self, paths: GuardianPaths) -> GuardianHandle | None:
        """The live guardian at ``paths``, handshaken, or None; never starts one (a person
        looking with ``tether ls`` must not change what runs)."""
        return await self._attach(paths)

    # -- connecting ------------------------------------------------------------------------

    async def _connect(self, workspace_root: str, thread_id: str | None, *,
                       start: bool) -> GuardianHandle | None:
        paths = guardian_paths(self.config, self.principal, workspace_root)
        if is_remote(workspace_root):
            return await self.remote().attach(RemoteWorkspace.parse(workspace_root), paths,
                                              start=start, thread_id=thread_id)
        handle = await self._attach(paths, workspace_root)
        if handle is not None or not start:
            return handle
        if thread_id is not None:
            self._refuse_unknown_thread(paths, workspace_root, thread_id)
        started = await asyncio.to_thread(self._start_locked, paths, workspace_root)
        handle = await self._attach(paths, workspace_root)
        if handle is None:
            raise TetherError(
                ErrorCode.GUARDIAN_START_FAILED,
                (f"a guardian started but did not answer its handshake; see {paths.log}"
                 if started else f"no guardian could be reached or started; see {paths.log}"),
                {"input_sent": False},
            )
        if started:
            handle.lost_records = handle.reconciled
        return handle

    def _refuse_unknown_thread(self, paths: GuardianPaths, workspace_root: str,
                               thread_id: str) -> None:
        """A thread no catalog of this workspace knows cannot be served: refuse it before a
        guardian is started for it (which would then idle for a day)."""
        try:
            if self._thread_row(paths, workspace_root, thread_id) is not None:
                return
        except StoreError:
            return  # unreadable from here: let the guardian decide
        raise TetherError(
            ErrorCode.SESSION_MISMATCH,
            f"thread_id {thread_id!r} is not a thread of {workspace_root}; nothing was started. "
            "Call Initialize (without thread_id for a new thread) and use the values it returns.",
            {"input_sent": False},
        )

    def known_thread(self, workspace_root: str, thread_id: str) -> PeekedThread | None:
        """The thread's row from the workspace's catalog on disk, whose guardian is gone, read
        without writing a byte (a crashed guardian's log index included), or None when this
        principal has no such thread there."""
        if is_remote(workspace_root):
            raise TetherError(
                ErrorCode.GUARDIAN_UNAVAILABLE,
                f"no guardian runs for {workspace_root}, and its catalog is on that host; a "
                "call other than status starts one there", {"input_sent": False})
        paths = guardian_paths(self.config, self.principal, workspace_root)
        try:
            return self._thread_row(paths, workspace_root, thread_id, left_behind=True)
        except StoreError as exc:
            raise TetherError(ErrorCode.INTERNAL, f"cannot read {paths.catalog}: {exc}") from None

    def _thread_row(self, paths: GuardianPaths, workspace_root: str, thread_id: str, *,
                    left_behind: bool = False) -> PeekedThread | None:
        thread = peek_thread(paths.catalog, thread_id, left_behind=left_behind)
        if thread is None or (thread["principal"], thread["workspace_root"]) != (
                self.principal, workspace_root):
            return None
        return thread

    async def _attach(self, paths: GuardianPaths,
                      workspace_root: str | None = None) -> GuardianHandle | None:
        info = read_info(paths)
        if info is None:
            return None
        identity = ProcessIdentity.from_dict(info)
        if identity is None or not identity.alive():
            return None
        where = workspace_root or str(info.get("workspace_root", paths.runtime))
        if is_stopped(identity.pid):
            # A handshake would wait out its deadline: say it at once, and start nothing.
            raise stopped(info, where)
        info_mtime = _mtime_ns(paths.info)
        client = new_client(info, info["endpoint"])
        asked = time.monotonic()
        try:
            greeting = await handshake(client, info, where)
        except TetherError as err:
            if err.code == ErrorCode.PROTOCOL_MISMATCH:
                raise
            if err.code == ErrorCode.GUARDIAN_UNAVAILABLE and identity.alive():
                # Alive (identity checked) but silent: say so, and start nothing. The wait
                # stated is the one measured: a stopped guardian never completes the socket's
                # handshake, so the send gives up (about 2s) before the reply's deadline.
                raise unresponsive(paths, info, where,
                                   waited_s=round(time.monotonic() - asked, 1)) from None
            return None
        if greeting is None:
            return None
        return GuardianHandle(paths, info, identity, client, client.version,
                              frozenset(greeting.capabilities),
                              reconciled=list(greeting.lost_records or []),
                              info_mtime_ns=info_mtime)

    def _start_locked(self, paths: GuardianPaths, workspace_root: str) -> bool:
        """Under the start lock: spawn a new guardian (which reconciles what a dead one left
        before it answers). Returns whether this call started a guardian."""
        with filelock.FileLock(str(paths.start_lock), mode=0o600, timeout=START_TIMEOUT_S):
            info = read_info(paths)
            identity = ProcessIdentity.from_dict(info) if info else None
            if identity is not None and identity.alive():
                return False  # someone else started it while we waited for the lock
            if info is not None and paths.catalog.exists():
                paths.info.unlink(missing_ok=True)
            self._children.append(spawn_guardian(paths, self.principal, workspace_root))
            self._await_info(paths)
            return True

    def _await_info(self, paths: GuardianPaths) -> None:
        """Block (in a worker thread) until a live guardian has announced itself."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            info = read_info(paths)
            ident = ProcessIdentity.from_dict(info) if info else None
            if ident is not None and ident.alive():
                return
            time.sleep(0.02)
        raise TetherError(
            ErrorCode.GUARDIAN_START_FAILED,
            f"the guardian did not start within {START_TIMEOUT_S:g}s; see {paths.log}",
        )


def _delivery_unknown(method: Method[Any, Any], host: str, then: str,
                      key: Any = None) -> TetherError:
    return TetherError(
        ErrorCode.DELIVERY_UNKNOWN,
        f"the SSH connection to {host} was lost while {method.name} waited for its answer, so "
        f"whether it was carried out is unknown; {then}. The guardian and its terminals on "
        f"{host} do not depend on the connection.",
        {"input_sent": "unknown", "delivery": "unknown", "host": host,
         **({"idempotency_key": key} if key else {})})


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def read_info(paths: GuardianPaths) -> dict[str, Any] | None:
    """guardian.json, or None when missing or unreadable."""
    try:
        info = json.loads(paths.info.read_text())
    except (OSError, ValueError):
        return None
    required = ("instance_id", "endpoint", "auth_token", "pid", "create_time", "boot_id")
    if not isinstance(info, dict) or not all(k in info for k in required):
        return None
    return info


def new_client(info: dict[str, Any], endpoint: str) -> GuardianClient:
    """A DEALER for the guardian ``info`` describes, at ``endpoint`` (its own, or a local
    socket forwarded to it), speaking the newest version this front-end knows."""
    version = Version(MAJOR, known_minor_versions()[-1].minor)
    return GuardianClient(endpoint, info["auth_token"], version=version,
                          instance_id=info["instance_id"])


async def handshake(client: GuardianClient, info: dict[str, Any],
                    where: str) -> HelloResult | None:
    """``hello`` with the guardian ``info`` describes; its greeting, with ``client.version``
    set to the version chosen. None (the client closed) when the answer is not that very
    guardian's; ``protocol_mismatch`` for another major; ``guardian_unavailable`` (the client
    closed) when no answer came."""
    version = client.version
    try:
        hello = await client.call(
            HELLO.name,
            {"client_min": [MAJOR, 0], "client_max": [version.major, version.minor]},
            timeout_s=HELLO_TIMEOUT_S,
        )
    except TetherError:
        client.close()
        raise
    try:
        greeting = HelloResult.model_validate(hello)
    except ValidationError:
        client.close()
        return None
    if greeting.instance_id != info["instance_id"]:
        client.close()
        return None
    chosen = Version(*greeting.version)
    if chosen.major != MAJOR:
        client.close()
        raise TetherError(
            ErrorCode.PROTOCOL_MISMATCH,
            f"the guardian at {info['endpoint']} speaks protocol {chosen}; this front-end "
            f"speaks {MAJOR}.0-{version}. Restart it with this version of Tether "
            f"(`{restart_for(info, where)}`).",
            {"client_range": [f"{MAJOR}.0", str(version)], "guardian_version": str(chosen),
             "operator_action_required": True, "input_sent": False},
        )
    client.version = chosen
    return greeting


def guardian_command() -> list[str]:
    """How to run a guardian so that ``ps`` shows ``tether-guardian <workspace>``."""
    script = Path(sys.executable).with_name("tether-guardian")
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "tether.guardian"]  # not installed with scripts (a bare checkout)


def spawn_guardian(paths: GuardianPaths, principal: str, workspace_root: str,
                   protocol: str | None = None) -> subprocess.Popen[bytes]:
    """Start a detached guardian: its own session, stdio to its log, umask 077
    (docs/protocol.md#guardians-one-per-key)."""
    argv = [*guardian_command(), workspace_root, "--principal", principal]
    if protocol:
        argv += ["--protocol", protocol]
    env = dict(os.environ)
    env.pop("TETHER_EXECUTION_ID", None)
    log_fd = os.open(paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
            close_fds=True,
            umask=0o077,
            env=env,
            cwd="/",
        )
    finally:
        os.close(log_fd)
