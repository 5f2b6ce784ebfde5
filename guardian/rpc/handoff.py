"""Live upgrade: the guardian re-executes itself with the installed code and keeps every
terminal (docs/protocol.md#live-upgrade).

``guardian.upgrade`` runs in three steps:

1. Try, while the guardian serves on: the handover document of this moment is written
   (0600, in the guardian's private runtime directory) and a process of the installed code
   loads it and exits (``--dry-run``). If it fails, nothing changed: the reply is
   ``upgrade_failed`` with the reason.
2. Quiet: every request but hello is refused from now on (``guardian_upgrading``, nothing
   done) and the requests in flight are let finish what they deliver (a command typed, a
   prompt and its receipt); nothing in the runtime may be half-way (an end marker being
   confirmed, a write the disk refused). Not quiet within :data:`HANDOFF_QUIET_S`:
   ``upgrade_failed``, and the guardian serves on.
3. Hand over, after the reply: requests that only wait are cut (answered
   ``guardian_upgrading``; sent again, they replay their recorded outcome), then in one
   synchronous step the state is captured, the terminals frozen (their descriptors and the
   lock's kept open over the exec), the catalog closed, and the process ``execve``s the
   installed code with ``--handover FILE``. The same pid keeps its children; the new code
   rebuilds what lived in memory and binds the same socket with the same instance id and
   token.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq

from tether.guardian.runtime import handover
from tether.guardian.runtime.assembly import Runtime
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import UpgradeParams
from tether.protocol.results import UpgradeResult
from tether.protocol.transport import RouterServer
from tether.protocol.versions import CODE_VERSION, Version, current_version
from tether.shared.config import Config
from tether.shared.paths import GuardianPaths, write_private_file
from tether.shared.segments import OutputSizes
from tether.shared.store.catalog import Catalog

if TYPE_CHECKING:
    from tether.guardian.rpc.service import GuardianService

log = logging.getLogger(__name__)

#: The handover document's layout; the new code refuses a newer one (its dry run fails).
HANDOVER_FORMAT = 1
#: Names the installed code to run, for tests and for trying a tree before installing it: a
#: directory holding ``tether/`` (``tether/guardian``, ``tether/protocol``, ...). Read from
#: the guardian's environment. Unset: ``python -m tether.guardian`` with this interpreter,
#: which imports whatever is installed now.
CODE_ENV = "TETHER_GUARDIAN_CODE"
#: How long the guardian waits for in-flight requests and the runtime to come to a quiet
#: point, before the dry run and again before the exec.
HANDOFF_QUIET_S = 5.0
QUIET_POLL_S = 0.005
#: How long the dry run of the installed code may take.
DRY_RUN_S = 20.0
#: How long refused and cut requests' answers may take to leave before the socket closes,
#: and how long front-ends get to read them first.
LINGER_MS = 1000
ANSWERS_READ_S = 0.1

#: Runs the guardian of ``argv[1]`` (a directory holding ``tether/``), whatever else is
#: installed: a ``tether`` namespace rooted there alone.
_BOOT = ("import sys, types; root = sys.argv.pop(1); pkg = types.ModuleType('tether'); "
         "pkg.__path__ = [root + '/tether']; sys.modules['tether'] = pkg; "
         "from tether.guardian.main import main; sys.exit(main())")


def installed_command(env: dict[str, str] | None = None) -> list[str]:
    """The argv that runs the installed guardian code (see :data:`CODE_ENV`)."""
    code = (os.environ if env is None else env).get(CODE_ENV)
    if code:
        return [sys.executable, "-c", _BOOT, code]
    return [sys.executable, "-m", "tether.guardian"]


@dataclass
class Serving:
    """What the daemon serves with, which the hand-over closes or hands on."""

    catalog: Catalog
    server: RouterServer
    context: zmq.Context[Any]
    lock_fd: int
    auth_token: str
    started_unix_ms: int


class Upgrader:
    """``guardian.upgrade`` for one guardian (see the module)."""

    def __init__(self, *, runtime: Runtime, service: GuardianService, serving: Serving,
                 paths: GuardianPaths, principal: str, workspace_root: str,
                 version: Version, instance_id: str,
                 agents: Callable[[], Any | None]) -> None:
        self._rt = runtime
        self._service = service
        self._serving = serving
        self._paths = paths
        self._principal = principal
        self._workspace_root = workspace_root
        self._version = version
        self._instance_id = instance_id
        #: The agent lifecycle if it was built (None: no agent ever ran here).
        self._agents = agents
        self._running = False
        self._task: asyncio.Task[None] | None = None

    async def upgrade(self, request: Request, params: UpgradeParams) -> UpgradeResult:
        if self._running:
            raise _failed("an upgrade of this guardian is already in progress")
        self._running = True
        path = self._paths.handover
        argv = installed_command()
        try:
            # Tried while the guardian serves on: the document the dry run loads is this
            # moment's (the one handed over is captured again at the exec).
            doc = self.document()
            write_private_file(path, json.dumps(doc).encode(), durable=False)
            started = time.monotonic()
            tried = await asyncio.to_thread(_dry_run, argv, self._principal,
                                            self._workspace_root, path)
            dry_run_ms = int((time.monotonic() - started) * 1000)
            if not params.dry_run:
                self._service.handing_off = True
                began = time.monotonic()
                await self._quiet(cut=False)
                quiet_ms = int((time.monotonic() - began) * 1000)
        except BaseException:
            path.unlink(missing_ok=True)
            self._resume()
            raise
        result = UpgradeResult.model_validate({
            "handing_over": not params.dry_run,
            "from_code_version": CODE_VERSION, "to_code_version": tried["code_version"],
            "from_protocol": str(self._version),
            "executions": [entry["execution_id"] for entry in doc["executions"]],
            "dry_run_ms": dry_run_ms,
        })
        if params.dry_run:
            path.unlink(missing_ok=True)
            self._resume()
            return result
        log.info("handing over to %s (code %s): %s; dry run %d ms (%d ms of CPU), quiet "
                 "after %d ms", " ".join(argv), tried["code_version"], params.reason,
                 dry_run_ms, tried["cpu_ms"], quiet_ms)
        # After this reply has gone: the reply is sent when the handler returns.
        self._task = asyncio.get_running_loop().create_task(self._hand_over(argv, path))
        return result

    def _resume(self) -> None:
        self._service.handing_off = False
        self._running = False

    def _blocked(self, *, cut: bool) -> str | None:
        service = self._service
        waiting = len(service.waiting_requests())
        acting = service.in_flight - waiting - (0 if cut else 1)  # this request itself
        if acting > 0:
            return f"{acting} request(s) in flight are still delivering"
        why = handover.blocked(self._rt)
        if why is None and (agents := self._agents()) is not None:
            why = agents.handover_blocked()
        return why

    async def _quiet(self, *, cut: bool) -> None:
        """Wait until nothing is half-way (see the module); with ``cut``, cut the requests
        that only wait first (they are answered ``guardian_upgrading``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANDOFF_QUIET_S
        while True:
            if cut:
                tasks = self._service.waiting_requests()
                for task in tasks:
                    task.cancel()
                if tasks:
                    await asyncio.wait(tasks, timeout=1.0)
                    await asyncio.sleep(0)  # their answers go out (RouterServer replies)
            why = self._blocked(cut=cut)
            if why is None:
                return
            if loop.time() >= deadline:
                raise _failed(f"the guardian did not come to a quiet point within {HANDOFF_QUIET_S:g}s "
                              f"({why}); nothing changed. Try again in a moment.")
            await asyncio.sleep(QUIET_POLL_S)

    def document(self) -> dict[str, Any]:
        """The handover document (see ``runtime/handover`` for what it holds and why)."""
        serving = self._serving
        return {
            "format": HANDOVER_FORMAT,
            "written_unix_ms": int(time.time() * 1000),
            "from_code_version": CODE_VERSION,
            "from_protocol": str(self._version),
            "guardian": {
                "instance_id": self._instance_id, "auth_token": serving.auth_token,
                "principal": self._principal, "workspace_root": self._workspace_root,
                "started_unix_ms": serving.started_unix_ms, "lock_fd": serving.lock_fd,
            },
            **handover.capture(self._rt),
            "agents": self._service.handover_part(),
        }

    async def _hand_over(self, argv: list[str], path: Path) -> None:
        await asyncio.sleep(0)  # the upgrade's own reply leaves first
        began = time.monotonic()
        try:
            for _ in range(3):
                await self._quiet(cut=True)
                # The answers just sent (this upgrade's, the refusals, the cut waits) are read
                # by their front-ends before the socket closes: a front-end that sees the
                # connection close drops what it received and had not read yet.
                await asyncio.sleep(ANSWERS_READ_S)
                if self._blocked(cut=True) is None:
                    break
            else:
                raise _failed("the guardian did not stay quiet for the exec; nothing changed")
            log.info("executing the installed code (quiet again after %d ms)",
                     int((time.monotonic() - began) * 1000))
            self._exec(argv, path)  # returns only when the exec was refused
        except TetherError as err:
            log.error("upgrade abandoned after its dry run: %s", err.message)
            path.unlink(missing_ok=True)
            self._resume()

    def _exec(self, argv: list[str], path: Path) -> None:
        """Capture, freeze, close, exec: one synchronous step (no output is read between
        the journals' ends taken and the exec)."""
        serving, rt = self._serving, self._rt
        try:
            serving.catalog.write_waiting()
        except Exception as exc:
            raise _failed(f"the catalog could not be written ({exc})") from None
        doc = self.document()
        write_private_file(path, json.dumps(doc).encode(), durable=False)
        handover.freeze(rt)
        # What comes from here is not read: a front-end sends it again once connected to the
        # new code (protocol/transport: GuardianClient._reconnected).
        serving.server.stop_reading()
        serving.catalog.close()
        serving.server.close(linger_ms=LINGER_MS)
        serving.context.term()
        os.set_inheritable(serving.lock_fd, True)
        full = [*argv, self._workspace_root, "--principal", self._principal,
                "--handover", str(path)]
        try:
            os.execv(full[0], full)
        except OSError as exc:
            # The terminals' watchers and the catalog are gone: this process cannot serve
            # on. Its children lose their terminals with it, and the next guardian records
            # what they were running as unknown (docs/tools.md#unknown-is-not-success).
            log.critical("exec of %s failed after the hand-over began: %s", full[0], exc)
            os._exit(70)


def _failed(reason: str) -> TetherError:
    return TetherError(ErrorCode.UPGRADE_FAILED, reason, {"input_sent": False})


def _dry_run(argv: list[str], principal: str, workspace_root: str,
             path: Path) -> dict[str, Any]:
    """Run the installed code on the handover document (``--dry-run``): its report, or
    ``upgrade_failed`` with what it said."""
    full = [*argv, workspace_root, "--principal", principal, "--handover", str(path),
            "--dry-run"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        done = subprocess.run(full, capture_output=True, text=True, timeout=DRY_RUN_S,
                              stdin=subprocess.DEVNULL, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _failed(f"the installed code could not be tried: {exc}; nothing changed") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip())[-2000:]
        raise _failed(f"the installed code failed its dry run (exit {done.returncode}): "
                      f"{said or 'no output'}; nothing changed, this guardian serves on")
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert isinstance(report, dict) and isinstance(report.get("code_version"), str)
    except (ValueError, IndexError, AssertionError):
        raise _failed("the installed code's dry run said nothing readable "
                      f"({done.stdout[-500:]!r}); nothing changed") from None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report["cpu_ms"] = int((after.ru_utime + after.ru_stime - before.ru_utime
                            - before.ru_stime) * 1000)
    return report


def load_document(path: str) -> dict[str, Any]:
    """The handover document at ``path`` (the new code's side), checked for its format."""
    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    if not isinstance(doc, dict) or not isinstance(doc.get("format"), int):
        raise ValueError(f"{path} is not a handover document")
    if doc["format"] > HANDOVER_FORMAT:
        raise ValueError(f"handover format {doc['format']} is newer than this code's "
                         f"({HANDOVER_FORMAT})")
    return doc


def dry_run(doc: dict[str, Any], paths: GuardianPaths, config: Config) -> dict[str, Any]:
    """The dry run of this code on ``doc``: everything a take-over would import is imported
    (the agents' rooms and rule sets too), the journals are found where the document says,
    and nothing is touched (no descriptor of the guardian's is inherited). Returns the
    report the guardian before reads; raises on anything this code could not take over."""
    # Imported here, in the dry run's own process: a guardian loads the agents' rooms only
    # when an agent runs, and the daemon imports this module.
    importlib.import_module("tether.guardian.agents.lifecycle")
    from tether.guardian.agents.recognize import default_rule_sets
    from tether.guardian.rpc.daemon import IMPLEMENTED

    default_rule_sets()
    sizes = OutputSizes(head=config.output_head_bytes, tail=config.output_tail_bytes)
    handover.check(paths.journals, sizes, doc)
    return {"code_version": CODE_VERSION, "protocol": str(current_version(IMPLEMENTED)),
            "executions": len(doc["executions"])}
