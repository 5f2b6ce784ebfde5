"""The front-end's per-call check that a guardian still runs (a pidfd, polled): it sees the end
of that very process, zombie or reaped, and never mistakes another process for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil

from tests.helpers import poll
from tether.frontend.guardians.locator import Liveness
from tether.shared.identity import ProcessIdentity

PIDFD = sys.platform == "linux" and hasattr(os, "pidfd_open")


def test_liveness_sees_its_process_end_before_it_is_reaped() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        identity = ProcessIdentity.of(child.pid)
        assert identity is not None
        liveness = Liveness(identity)
        assert liveness.alive()
        assert (liveness._poll is not None) == PIDFD  # one system call per check on Linux
        os.kill(child.pid, signal.SIGKILL)
        poll(lambda: not liveness.alive(), timeout=5, what="the kill to show")
        assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE  # not reaped yet
        liveness.close()
        assert not liveness.alive()  # closed: falls back to the identity, which is gone too
    finally:
        child.kill()
        child.wait()


def test_liveness_of_another_process_with_the_pid_is_dead() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        identity = ProcessIdentity.of(child.pid)
        assert identity is not None
        # The same pid with another create time: a process that reused the pid.
        stranger = ProcessIdentity(child.pid, identity.create_time - 5.0, identity.boot_id)
        liveness = Liveness(stranger)
        assert liveness._poll is None and not liveness.alive()
    finally:
        child.kill()
        child.wait()
