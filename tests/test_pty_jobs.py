"""A background command's runtime: a small bash leader whose job is the command (pty.job_argv)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tether.guardian.history.journal import Journal
from tether.guardian.runtime.inputs import InputDesk
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.pty import _JOB_WRAPPER, ExitStatus, PtyRuntime
from tether.guardian.terminal.screen import TerminalScreen
from tether.protocol.methods import ExecInputParams

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def _slow_leader(tmp_path: Path) -> AsyncIterator[tuple[PtyRuntime, asyncio.Future[ExitStatus]]]:
    """A background runtime whose leader hands the terminal to its job (`cat`) only 0.3 s
    after it starts: the window in which a Ctrl-c would reach the leader instead."""
    exited: asyncio.Future[ExitStatus] = asyncio.get_running_loop().create_future()
    runtime = PtyRuntime(
        ["bash", "-c", "sleep 0.3; " + _JOB_WRAPPER, "tether-job", "bash", "-c", "cat"],
        env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path), rows=5, cols=40,
        on_output=lambda data: None, on_exit=exited.set_result, job_leader=True)
    identity = runtime.start()
    fd = runtime.fd
    assert fd is not None
    try:
        assert os.tcgetpgrp(fd) == identity.pid  # the leader holds the terminal
        yield runtime, exited
    finally:
        if not exited.done():
            await runtime.end_session(1.0)  # hang up leader and job, and reap the leader
        runtime.close()


async def test_a_signal_key_waits_for_the_job_to_take_the_terminal_from_its_leader(
        tmp_path: Path) -> None:
    """A Ctrl-c typed while the leader has not handed the terminal to its job yet would
    reach the leader's group (here it dies of it during its slow start, and the job never
    runs; a leader that had forked already would wait on and the job would run on).
    ``job_in_front`` waits for the job, so the job gets the Ctrl-c: it ends with 130, and the
    leader exits with that status."""
    async with _slow_leader(tmp_path) as (runtime, exited):
        await runtime.job_in_front()
        assert os.tcgetpgrp(runtime.fd or -1) != runtime.pid  # now the job holds it
        await runtime.write(b"\x03", timeout_s=5)
        assert await asyncio.wait_for(exited, 10) == ExitStatus(exit_code=130, signal=None)


class _OneExecution(InputDesk):
    """exec.input's desk with its target given (no catalog or thread lookups)."""

    def __init__(self, live: LiveExecution) -> None:
        self._only = live

    def _target(self, params: ExecInputParams) -> tuple[LiveExecution, int]:
        return self._only, self._only.generation


async def test_ctrl_c_sent_right_after_a_background_start_reaches_its_job(
        tmp_path: Path) -> None:
    """Through exec.input's desk: Ctrl-c waits for the job (which then ends with 130), and
    text that signals nothing does not wait."""
    async with _slow_leader(tmp_path) as (runtime, exited):
        live = LiveExecution(execution_id="ex_0123456789abcdef", thread_id="th_0123456789abcdef",
                             kind="background", generation=1,
                             journal=Journal(tmp_path, "ex_0123456789abcdef", new=True),
                             runtime=runtime, screen=TerminalScreen(cols=40, rows=5))
        desk = _OneExecution(live)
        scope: dict[str, object] = {"principal": "local", "workspace_root": str(tmp_path),
                 "thread_id": "th_0123456789abcdef", "execution_id": live.execution_id}
        loop = asyncio.get_running_loop()
        began = loop.time()
        await desk.send(ExecInputParams.model_validate(
            {**scope, "text": "typed", "idempotency_key": "k" * 32}), write_timeout_s=5)
        assert loop.time() - began < 0.2  # nothing that signals: typed while the leader sleeps
        await desk.send(ExecInputParams.model_validate(
            {**scope, "keys": ["Ctrl-c"], "idempotency_key": "j" * 32}), write_timeout_s=5)
        assert await asyncio.wait_for(exited, 10) == ExitStatus(exit_code=130, signal=None)
        live.journal.close()
