"""The guardian process: lock, bind, announce, serve, and exit cleanly
(docs/protocol.md#guardians-one-per-key).

Order matters: the exclusive lock is taken before the socket is bound (a second ZeroMQ bind
to an ipc path silently steals the endpoint), and ``guardian.json`` is written only once the
socket is bound, so a front-end that reads it can connect at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import json
import logging
import os
import secrets
import signal
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import zmq

from tether.guardian.history.reconcile import reconcile_lost
from tether.guardian.rpc.handoff import Serving, Upgrader
from tether.guardian.rpc.memory import QuietTrimmer
from tether.guardian.rpc.service import GuardianService
from tether.guardian.runtime import handover as runtime_handover
from tether.guardian.runtime.assembly import Runtime
from tether.guardian.runtime.caps import RunningCaps
from tether.guardian.runtime.threads import GUARDIAN_IDLE_EXIT, GUARDIAN_STOPPED, process_env
from tether.protocol.transport import RouterServer
from tether.protocol.versions import (
    CODE_VERSION,
    Capability,
    Version,
    capabilities_for,
    current_version,
)
from tether.shared.clock import Clock
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths, guardian_paths, write_private_file
from tether.shared.segments import OutputSizes
from tether.shared.store.catalog import Catalog

log = logging.getLogger(__name__)

#: Capabilities this build implements. The advertised version is derived from it.
IMPLEMENTED = frozenset({
    Capability.EXEC, Capability.SCREEN, Capability.OBSERVE, Capability.WAIT,
    Capability.RECOGNITION, Capability.PROMPT_RECEIPTS, Capability.PERSON_VIEW,
    Capability.THREAD_MODES,
    Capability.AGENT_LIFECYCLE,
    Capability.MODE_SANDBOX, Capability.LINE_LIMITS, Capability.LIST_PAGES,
    Capability.REPLACE_DRAFT, Capability.LAUNCH_ENV, Capability.TURN_LOG,
    Capability.APPROVALS,
    Capability.FILES,
    Capability.LIVE_UPGRADE,
})

#: How often the guardian checks that its socket file is still its own.
SOCKET_CHECK_S = 0.5

#: Exit code when another guardian already serves this key (not an error for a racer).
EXIT_ALREADY_RUNNING = 3


class AlreadyRunning(Exception):
    """Another guardian holds this key's lock."""


class Guardian:
    """One guardian for one (principal, workspace)."""

    def __init__(
        self,
        *,
        config: Config,
        principal: str,
        workspace_root: str,
        protocol: Version | None = None,
        clock: Clock | None = None,
        handover: dict[str, Any] | None = None,
    ) -> None:
        """``handover``: this very process ran a guardian until it re-executed itself with
        this code (docs/protocol.md#live-upgrade): the document it left, taken over here
        (same instance id, token, lock and children)."""
        self.config = config
        self.principal = principal
        self.workspace_root = workspace_root
        self.clock = clock or Clock()
        self.version = protocol or current_version(IMPLEMENTED)
        self.capabilities = capabilities_for(self.version)
        if not self.capabilities <= IMPLEMENTED:
            raise ValueError(f"this build cannot speak protocol {self.version}")
        self._handover = handover
        self.instance_id = (str(handover["guardian"]["instance_id"]) if handover is not None
                            else str(uuid.uuid4()))
        self._started_ms = (int(handover["guardian"]["started_unix_ms"]) if handover is not None
                            else self.clock.now_ms())
        self._upgraded_ms = self.clock.now_ms() if handover is not None else None
        self.paths: GuardianPaths = guardian_paths(config, principal, workspace_root)
        self._stop = asyncio.Event()
        self._stop_reason = ""
        #: Why the shells end when this guardian stops (told by the shells that replace them).
        self._shell_end = GUARDIAN_STOPPED
        self._last_activity = self.clock.monotonic()
        self._trimmer = QuietTrimmer()

    def run(self) -> int:
        """Run in the foreground until SIGTERM, shutdown, or idleness. Returns an exit code."""
        # A plain flock(2) on guardian.lock, as the filelock package takes it on Unix (and as
        # `tether doctor` reads it from /proc/locks), without importing that package into
        # the guardian (about 1 MB resident; docs/development.md#benchmarks idle RSS). The descriptor is not
        # inherited by the shells (os.open makes it close-on-exec); the kernel drops the lock
        # if this process dies.
        if self._handover is not None:
            # The lock's descriptor, kept open over the exec: the lock is still ours (a
            # flock belongs to the open file, which this process never let go of).
            fd = int(self._handover["guardian"]["lock_fd"])
            os.set_inheritable(fd, False)
        else:
            fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        self._lock_fd = fd
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("another guardian already serves %s", self.workspace_root)
                return EXIT_ALREADY_RUNNING
            asyncio.run(self._main())
        finally:
            os.close(fd)
        return 0

    async def _main(self) -> None:
        os.umask(0o077)
        handed = self._handover
        context: zmq.Context[Any] = zmq.Context()
        # Its handler is the service's, set once the service exists (nothing is read before
        # serve()). A live upgrade binds the socket first (front-ends connected before
        # reconnect at once, and their requests wait in the socket), a fresh start once it
        # is ready to serve.
        server = RouterServer(self.paths.endpoint, _not_serving, context)
        if handed is not None:
            self.paths.socket.unlink(missing_ok=True)  # the code before closed it; ours now
            server.bind()
        else:
            self.paths.handover.unlink(missing_ok=True)  # a hand-over that never finished
        catalog = Catalog(self.paths.catalog, self.clock)
        catalog.checkpoint_in_background()  # no commit on the loop waits for a disk sync
        # Before anything is answered: what a dead predecessor left running is unknown now
        # (hello tells it, and the front-end that started this guardian reports it).
        lost = reconcile_lost(catalog, self.paths.journals, except_owner=self.instance_id)
        if lost:
            log.warning("records of an earlier guardian marked unknown: %s", lost)
        runtime = Runtime.build(
            catalog=catalog,
            paths=self.paths,
            principal=self.principal,
            workspace_root=self.workspace_root,
            instance_id=self.instance_id,
            clock=self.clock,
            base_env=process_env(),
            mode_sandbox=Capability.MODE_SANDBOX in self.capabilities,
            files=Capability.FILES in self.capabilities,
            caps=RunningCaps(per_thread=self.config.max_running_per_thread,
                             per_guardian=self.config.max_running_per_guardian),
            sizes=OutputSizes(head=self.config.output_head_bytes,
                              tail=self.config.output_tail_bytes),
        )
        # Records that expired while no guardian ran go without waiting for a request (the
        # sweep runs in batches on the loop once it serves).
        runtime.retention.sweep_soon(runtime.live.protected)
        identity = ProcessIdentity.of(os.getpid())
        assert identity is not None
        auth = str(handed["guardian"]["auth_token"]) if handed else secrets.token_hex(32)
        service = GuardianService(
            runtime=runtime,
            instance_id=self.instance_id,
            identity=identity.to_dict(),
            auth_token=auth,
            version=self.version,
            capabilities=self.capabilities,
            clock=self.clock,
            on_activity=self._touch,
            on_shutdown=self.request_stop,
            reconciled=lost,
            notify_command=self.config.notify_command,
            notify_timeout_s=self.config.notify_timeout_s,
            code_version=CODE_VERSION,
            upgraded_unix_ms=self._upgraded_ms,
        )
        if handed is not None:
            # Before anything is answered: the terminals, shells, agents and receipts the
            # code before left are this code's now.
            service.adopt_part(runtime_handover.adopt(runtime, handed), handed.get("agents"))
            self.paths.handover.unlink(missing_ok=True)
            log.info("took over %d executions and %d shells from code %s, %d ms after the "
                     "hand-over document was written", len(handed["executions"]),
                     len(handed["shells"]), handed.get("from_code_version"),
                     int(time.time() * 1000) - int(handed["written_unix_ms"]))
        server.handler = service.handle_frame
        upgrader = Upgrader(
            runtime=runtime, service=service,
            serving=Serving(catalog=catalog, server=server, context=context,
                            lock_fd=self._lock_fd, auth_token=auth,
                            started_unix_ms=self._started_ms),
            paths=self.paths, principal=self.principal, workspace_root=self.workspace_root,
            version=self.version, instance_id=self.instance_id,
            agents=lambda: service.agents_if_built)
        service.set_upgrader(upgrader.upgrade)
        # Start-up (imports, the catalog, the rooms) leaves cyclic garbage behind: collect it
        # once, before serving, so its memory can be trimmed; then freeze what survives (the
        # modules and classes, alive for good) so that later full collections, which run on
        # the loop, do not walk those objects again.
        gc.collect()
        gc.freeze()
        if handed is None:
            # Left by a crashed predecessor; we hold the lock.
            self.paths.socket.unlink(missing_ok=True)
            server.bind()
        self._announce(identity, auth)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.request_stop, signal.Signals(sig).name)
        serve_task = loop.create_task(server.serve())
        self._trimmer.touch()  # start-up's imports leave garbage behind: trim once quiet
        idle_task = loop.create_task(self._idle_watch(runtime))
        socket_task = loop.create_task(self._socket_watch(server))
        log.info("guardian %s serving %s (protocol %s)", self.instance_id, self.workspace_root,
                 self.version)
        await self._stop.wait()
        log.info("guardian stopping: %s", self._stop_reason)
        idle_task.cancel()
        socket_task.cancel()
        # Answer in-flight requests that are about to finish, then stop listening.
        self._withdraw()
        await service.shutdown_agents()
        await runtime.shutdown(reason=self._shell_end)
        serve_task.cancel()
        await asyncio.gather(serve_task, idle_task, socket_task, return_exceptions=True)
        self._trimmer.cancel()
        server.close()
        context.term()
        catalog.close()
        self.paths.socket.unlink(missing_ok=True)

    def _announce(self, identity: ProcessIdentity, auth: str) -> None:
        """Write guardian.json (0600): identity, endpoint, protocol, capabilities, token
        (docs/protocol.md#guardians-one-per-key)."""
        info: dict[str, Any] = {
            "instance_id": self.instance_id,
            **identity.to_dict(),
            "endpoint": self.paths.endpoint,
            "protocol": str(self.version),
            "capabilities": sorted(str(c) for c in self.capabilities),
            "auth_token": auth,
            "principal": self.principal,
            "workspace_root": self.workspace_root,
            "started_unix_ms": self._started_ms,
            "log": str(self.paths.log),
            "code_version": CODE_VERSION,
        }
        if self._upgraded_ms is not None:
            info["upgraded_unix_ms"] = self._upgraded_ms
        write_private_file(self.paths.info, json.dumps(info, indent=2).encode())

    def _withdraw(self) -> None:
        """Remove guardian.json if it is still ours."""
        try:
            info = json.loads(self.paths.info.read_text())
        except (OSError, ValueError):
            return
        if info.get("instance_id") == self.instance_id:
            self.paths.info.unlink(missing_ok=True)

    def _touch(self) -> None:
        self._last_activity = self.clock.monotonic()
        self._trimmer.touch()

    def request_stop(self, reason: str) -> None:
        """Begin a clean shutdown (signal handler, ``guardian.shutdown``, idleness)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    async def _socket_watch(self, server: RouterServer) -> None:
        """Bind again when the socket file is deleted or replaced (a cleaner of /tmp, a person).

        Connected front-ends would keep working, but every new one would find nobody at the
        endpoint although this guardian lives and holds the lock: the workspace would be
        unreachable until someone killed it by hand.
        """
        bound = _file_id(self.paths.socket)
        while True:
            await asyncio.sleep(SOCKET_CHECK_S)
            now = _file_id(self.paths.socket)
            if now is not None and now == bound:
                continue
            log.warning("socket %s was %s; binding it again", self.paths.socket,
                        "deleted" if now is None else "replaced")
            try:
                server.rebind()
            except zmq.ZMQError as exc:
                log.error("could not bind %s again: %s", self.paths.endpoint, exc)
                continue
            bound = _file_id(self.paths.socket)

    async def _idle_watch(self, runtime: Runtime) -> None:
        """Exit after the idle period with no request and no running execution
        (docs/protocol.md#guardians-one-per-key)."""
        idle_s = self.config.guardian_idle_s
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 60.0))
            if runtime.has_running_work():
                self._touch()
            elif self.clock.monotonic() - self._last_activity >= idle_s:
                if not self._stop.is_set():
                    self._shell_end = GUARDIAN_IDLE_EXIT
                self.request_stop(f"idle for {idle_s:g}s")
                return


async def _not_serving(frame: bytes) -> bytes | None:
    """The socket's handler until the service exists (never called: nothing is read yet)."""
    return None


def _file_id(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the socket file at ``path``; None when it is gone or is not a
    socket (a file put in its place)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None
