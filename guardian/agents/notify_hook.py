"""The operator hook (docs/tools.md#the-operator-hook): ``TETHER_NOTIFY_COMMAND`` run once per
notice — every approval an agent asks, every finished turn, error or close of a managed
agent — with the notice as JSON on its stdin, so that a person's desktop or phone hears of it.

The notices are rows of the catalog (``approval_table``), written in the same transaction as
what they tell of; this module runs the hook over them in order, one at a time. A run is
marked ``started`` before the program starts: a guardian that dies meanwhile leaves it, and
the next one calls it ``unknown`` instead of running it again (a notice is heard at most
once). The program runs as the literal argv (never through a shell), in a session of its own,
with a deadline (``TETHER_NOTIFY_TIMEOUT_S``): past it the whole session is killed. At most
:data:`MAX_HOOK_OUTPUT` bytes of what it prints are kept for the guardian's log. The run
happens in a thread of its own, off the event loop: a hook that hangs or fails is logged and
costs the guardian nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.shared.store.catalog import Catalog

log = logging.getLogger(__name__)

#: What is kept of a hook's output (stdout and stderr together), for the log.
MAX_HOOK_OUTPUT = 4096
#: A notice handed to the hook is at most this large (an approval's screen is the big part).
MAX_NOTICE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class HookRun:
    """How one run ended: ``ok``, ``failed`` (a nonzero exit, a signal, no program) or
    ``timed_out`` (killed at the deadline)."""

    state: str
    detail: str
    output: bytes


def run_hook(argv: tuple[str, ...], payload: bytes, timeout_s: float,
             env: dict[str, str] | None = None,
             on_start: Callable[[int | None], None] | None = None) -> HookRun:
    """Run ``argv`` with ``payload`` on stdin; kill its session at ``timeout_s``. Blocking:
    called in the hook's own thread. ``on_start`` hears the pid once it runs (and None once
    it is gone), so that a guardian stopping can end it at once."""
    deadline = time.monotonic() + timeout_s
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=env)
    except OSError as exc:
        return HookRun("failed", f"could not start {argv[0]!r}: {exc}", b"")
    assert proc.stdin is not None and proc.stdout is not None
    if on_start is not None:
        on_start(proc.pid)
    stdin, stdout = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(stdin, False)
    os.set_blocking(stdout, False)
    output = bytearray()
    sent = 0
    open_out = True
    writing = True
    timed_out = False
    try:
        while open_out or proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            wants_write = [stdin] if writing else []
            readable, writable, _ = select.select([stdout] if open_out else [], wants_write, [],
                                                  min(left, 0.05))
            if writable:
                try:
                    sent += os.write(stdin, payload[sent:])
                except (BrokenPipeError, BlockingIOError) as exc:
                    if isinstance(exc, BrokenPipeError):
                        sent = len(payload)  # it does not read its stdin: nothing more to say
                if sent >= len(payload):
                    proc.stdin.close()
                    writing = False
            if readable:
                chunk = os.read(stdout, 65536)
                if not chunk:
                    open_out = False
                elif len(output) < MAX_HOOK_OUTPUT:
                    output += chunk[:MAX_HOOK_OUTPUT - len(output)]
            if not open_out and not readable and proc.poll() is None:
                time.sleep(0.01)
    finally:
        if timed_out or proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            if writing:
                proc.stdin.close()
        proc.stdout.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        if on_start is not None:
            on_start(None)
    if timed_out:
        return HookRun("timed_out", f"killed after {timeout_s:g}s (TETHER_NOTIFY_TIMEOUT_S)",
                       bytes(output))
    code = proc.returncode
    if code == 0:
        return HookRun("ok", "exit code 0", bytes(output))
    detail = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    return HookRun("failed", detail, bytes(output))


class NoticeHook:
    """Runs the operator hook over the catalog's pending notices (see the module docstring)."""

    def __init__(self, catalog: Catalog, argv: tuple[str, ...], timeout_s: float) -> None:
        self._catalog = catalog
        self.argv = argv
        self.timeout_s = timeout_s
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._running: int | None = None  # the pid of the run under way (its session's id)

    @property
    def enabled(self) -> bool:
        return bool(self.argv)

    def add(self, kind: str, notice: dict[str, Any]) -> None:
        """Write a notice for the hook (inside the caller's transaction) and run it soon."""
        if not self.enabled:
            return
        body = {"kind": kind, **notice}
        if len(json.dumps(body)) > MAX_NOTICE_BYTES and isinstance(body.get("approval"), dict):
            body["approval"] = {**body["approval"], "screen": ""}  # the request says enough
        self._catalog.add_notice(kind, body)
        self.kick()

    def kick(self) -> None:
        """Run what is pending, after the current step (and its commit) is done."""
        if not self.enabled or (self._task is not None and not self._task.done()):
            return
        with contextlib.suppress(RuntimeError):  # no loop: the next guardian runs them
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._drain(), name="notify-hook")

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # after the transaction that wrote the notice
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notify-hook")
        while True:
            try:
                pending = self._catalog.pending_notices()
            except Exception:
                log.exception("the operator hook could not read its notices")
                return
            if not pending:
                return
            for notice_id, body in pending:
                try:
                    self._catalog.set_notice_hook(notice_id, "started")
                except Exception:
                    log.exception("the operator hook could not mark notice %s", notice_id)
                    return
                payload = json.dumps({"notice_id": notice_id, **body}).encode()
                try:
                    run = await loop.run_in_executor(self._executor, run_hook, self.argv,
                                                     payload, self.timeout_s, None,
                                                     self._started)
                except Exception as exc:  # the thread itself failed: say so, go on
                    run = HookRun("failed", f"could not run: {exc}", b"")
                if run.state != "ok":
                    log.warning("TETHER_NOTIFY_COMMAND %s for notice %s (%s): %s; output: %r",
                                run.state, notice_id, body.get("kind"), run.detail,
                                run.output[:512])
                try:
                    self._catalog.set_notice_hook(notice_id, run.state, run.detail)
                except Exception:
                    log.exception("the operator hook could not record notice %s", notice_id)
                    return

    def _started(self, pid: int | None) -> None:
        self._running = pid

    def close(self) -> None:
        """Guardian stopping: no new runs, and the one under way is ended now (its notice
        stays ``started``: the next guardian calls it ``unknown``)."""
        if self._task is not None:
            self._task.cancel()
        pid = self._running
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
