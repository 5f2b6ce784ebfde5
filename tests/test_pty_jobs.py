"""A background command's runtime: a small bash leader whose job is the command (pty.job_argv)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tether.guardian.runtime.pty import _JOB_WRAPPER, ExitStatus, PtyRuntime

pytestmark = pytest.mark.anyio


async def test_a_signal_key_waits_for_the_job_to_take_the_terminal_from_its_leader(
        tmp_path: Path) -> None:
    """A Ctrl-c typed while the leader has not handed the terminal to its job yet would
    reach the leader's group (here it dies of it during its slow start, and the job never
    runs; a leader that had forked already would wait on and the job would run on).
    ``job_in_front`` waits for the job, so the job gets the Ctrl-c: it ends with 130, and the
    leader exits with that status."""
    exited: asyncio.Future[ExitStatus] = asyncio.get_running_loop().create_future()
    slow_leader = "sleep 0.3; " + _JOB_WRAPPER  # the job starts 0.3 s after the leader
    runtime = PtyRuntime(
        ["bash", "-c", slow_leader, "tether-job", "bash", "-c", "cat"],
        env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path), rows=5, cols=40,
        on_output=lambda data: None,
        on_exit=exited.set_result, job_leader=True)
    identity = runtime.start()
    fd = runtime.fd
    assert fd is not None
    try:
        assert os.tcgetpgrp(fd) == identity.pid  # the leader holds the terminal
        await runtime.job_in_front()
        assert os.tcgetpgrp(fd) != identity.pid  # now the job does
        await runtime.write(b"\x03", timeout_s=5)
        assert await asyncio.wait_for(exited, 10) == ExitStatus(exit_code=130, signal=None)
    finally:
        runtime.close()
