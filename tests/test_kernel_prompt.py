"""What the kernel says about a shell at its prompt (runtime/kernel.why_not_at_prompt)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from ptyprocess import PtyProcess

from tests.helpers import poll
from tether.guardian.runtime import kernel
from tether.guardian.runtime.pty import PtyRuntime


@contextmanager
def _in_a_terminal(code: str) -> Iterator[PtyProcess]:
    """A Python program as the session leader of a terminal of its own, as a shell is."""
    process = PtyProcess.spawn([sys.executable, "-c", code])
    try:
        yield process
    finally:
        process.close(force=True)


@pytest.mark.skipif(kernel._INPUT_SYSCALLS is None,
                    reason="no system-call table for this architecture: the check cannot tell")
def test_a_program_that_runs_between_short_sleeps_is_never_taken_for_idle() -> None:
    """The state (sleeping) and the system call are read at two instants; a program that woke
    in between reads as "running" there, and that is not idle (it was: about 4% of the
    readings of this program said idle, and a line typed ahead then lent its exit status to
    the command typed after it)."""
    busy = ("import time\n"
            "while True:\n"
            "    until = time.perf_counter() + 0.00005\n"
            "    while time.perf_counter() < until: pass\n"
            "    time.sleep(0.00005)\n")
    with _in_a_terminal(busy) as process:
        readings = [kernel.why_not_at_prompt(process.fd, process.pid) for _ in range(5000)]
    idle = readings.count(None)
    assert idle == 0, f"{idle} of 5000 readings took a program that never reads for idle"


def test_a_program_waiting_to_read_its_terminal_is_idle() -> None:
    with _in_a_terminal("import sys; sys.stdin.read(1)") as process:
        poll(lambda: kernel.why_not_at_prompt(process.fd, process.pid) is None, timeout=10,
             what="the program to wait for its terminal")


@pytest.mark.anyio
async def test_what_a_program_wrote_before_it_waits_is_read_before_its_wait_is_trusted(
        tmp_path: Path) -> None:
    """``read_pending`` after the kernel says "waiting": everything the program wrote before
    it sat down comes now (the shell's check judges again when markers were among it: a
    typed-ahead line's end, still on its way, was taken for the next command's)."""
    got: list[bytes] = []
    runtime = PtyRuntime(["bash", "-c", "printf 'written before'; read x"],
                         env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path), rows=5, cols=40,
                         on_output=got.append, on_exit=lambda status: None)
    runtime.start()
    fd, pid = runtime.fd, runtime.pid
    assert fd is not None and pid is not None
    try:
        # Blocking on purpose: the loop's own reader must not take the bytes first.
        poll(lambda: kernel.why_not_at_prompt(fd, pid) is None, timeout=10,
             what="the program to wait for its terminal")
        assert runtime.read_pending() == len(b"written before")
        assert b"".join(got).endswith(b"written before")
        assert runtime.read_pending() == 0
    finally:
        await runtime.end_session(1.0)
        runtime.close()
