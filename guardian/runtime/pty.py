"""One child process in a real PTY, driven by the guardian's event loop.

The reader only hands bytes on (docs/tools.md#screens): whoever owns the runtime appends them to a
journal and a lazy screen. Exit is observed through a pidfd, so there is no polling and no
SIGCHLD handler; ptyprocess stays the one reaper (NOTES: a second reaper breaks it).

The exit is reported only once the terminal has been drained: until EOF (no process holds
the terminal any more) or :data:`DRAIN_BOUND_S` after the exit, so output that a child left
behind writes just after its parent ended is not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import signal
import struct
import termios
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ptyprocess import PtyProcess

from tether.guardian.runtime import kernel
from tether.guardian.runtime.eager import in_task
from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.identity import ProcessIdentity, boot_id

#: Linux's ioctl that opens a pseudo-terminal's other end from its master (4.13 and later).
_TIOCGPTPEER = 0x5441
log = logging.getLogger(__name__)

PTY_READ_CHUNK = 256 * 1024
#: Most bytes one reader wake-up takes before it lets the loop run something else. Passing a
#: burst on (the query scan, the journal write) costs about 4 ms per MiB on top of reading it:
#: a quarter of that keeps every reader callback near the 2 ms budget below.
READ_BURST = 256 * 1024
#: Most time one reader wake-up spends reading. A PTY hands over a few kilobytes per read and
#: each read lets the writer run again, so a full burst can take tens of milliseconds on a
#: busy machine: past this budget the rest waits for the next wake-up (a loop iteration later),
#: and requests queued meanwhile are answered first (the event loop never stalls,
#: docs/development.md#benchmarks).
READ_BUDGET_S = 0.002
#: After the runtime's process exits, how long other holders of the terminal (children it
#: left behind) may keep writing before the exit is reported and the terminal closed.
DRAIN_BOUND_S = 1.0
#: Most bytes read_pending takes at once: several times what a terminal buffers, so that a
#: program seen waiting cannot have written more; past it the caller judges again later.
READ_PENDING_CAP = 1024 * 1024


#: How a background command runs: ``bash -c COMMAND`` as a foreground job of a small bash
#: with job control. The job has its own process group, so when the session leader exits
#: the kernel's hangup (sent to the terminal's foreground group, by then the leader's own)
#: does not kill children the command left behind, and their last output still arrives.
#: (A non-interactive bash controls the terminal through its fd 2, so that stays the
#: terminal; a job killed by a signal is therefore reported on it, e.g. "Killed".)
#:
#: The leader keeps SIGHUP's default action. When the terminal goes away (the guardian
#: died, so the PTY's other side closed) the kernel hangs up the session leader only, and
#: the foreground job only when the leader exits: the leader's death is what hangs the job
#: up, as a job in a closed terminal is. (A trap would not help: bash runs it only once its
#: foreground job has ended; an ignored signal would be inherited by the job.) A job that
#: ignores the hangup outlives its leader; it is still found by its ``TETHER_EXECUTION_ID``
#: mark and reported as an orphan (``guardian/history/reconcile``). A hangup the guardian sends itself
#: (shutdown) spares the leader (``job_leader``): the job ends, then the leader with the
#: job's status, and a job that ignores it keeps its leader, and so its record, running.
_JOB_WRAPPER = 'set -m; "$@"; exit $?'
#: How long a signal key typed right after a background command's start waits for the job
#: to take the terminal from its leader (see :meth:`PtyRuntime.job_in_front`), and how often
#: it looks.
JOB_FRONT_WAIT_S = 0.5
JOB_FRONT_POLL_S = 0.001


def job_argv(command: str) -> list[str]:
    """The argv of a background command's runtime (see :data:`_JOB_WRAPPER`)."""
    return ["bash", "-c", _JOB_WRAPPER, "tether-job", "bash", "-c", command]


class NotStarted(OSError):
    """:meth:`PtyRuntime.start` failed before the program ran (no terminal, no descriptor
    for the fork, no such program): nothing of it ran, and nothing is left to clean up."""


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a runtime ended: an exit code, or the signal that killed it."""

    exit_code: int | None
    signal: int | None

    @property
    def shell_style_code(self) -> int:
        """The code a shell would report (128 + signal for a killed process)."""
        if self.exit_code is not None:
            return self.exit_code
        return 128 + (self.signal or 0)


class PtyRuntime:
    """A process in a PTY. Call :meth:`start` on the event loop's thread."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        rows: int,
        cols: int,
        on_output: Callable[[bytes], None],
        on_exit: Callable[[ExitStatus], None],
        job_leader: bool = False,
    ) -> None:
        self.argv = list(argv)
        #: ``argv`` is :func:`job_argv`'s leader, which ends after its job (see hangup).
        self._job_leader = job_leader
        self._job_front_waited = False  # job_in_front waits once, at most
        self._env = dict(env)
        self._cwd = cwd
        self.rows, self.cols = rows, cols
        self._on_output = on_output
        self._on_exit = on_exit
        self._proc: PtyProcess | None = None
        self._pidfd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.identity: ProcessIdentity | None = None
        self.exit_status: ExitStatus | None = None
        # The one input lock of this terminal (see claim_input); None when nobody types.
        self._input_claim: object | None = None
        #: Told of every input written (keys, text, a person's typing), when set: the
        #: approval desk learns how a question on screen was answered (agents/approval_desk).
        self.on_input: Callable[[bytes], None] | None = None
        self._reading = True  # not paused by flow control
        self._eof = False  # no process holds the terminal's other end any more
        self._drain_timer: asyncio.TimerHandle | None = None
        self._exit_reported = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> ProcessIdentity:
        """Spawn the child and start watching its output and its exit.

        Raises :class:`NotStarted` when the program did not run (ptyprocess reports a failed
        fork or exec before it returns), any other OSError when it ran but could not be
        watched (no descriptor left for its pidfd): it is killed then, never left unwatched.
        """
        loop = asyncio.get_running_loop()
        self._loop = loop
        try:
            proc = PtyProcess.spawn(
                self.argv, cwd=self._cwd, env=self._env, dimensions=(self.rows, self.cols)
            )
        except OSError as exc:
            raise (NotStarted(exc.errno, exc.strerror) if exc.errno is not None
                   else NotStarted(str(exc))) from exc
        self._proc = proc
        try:
            os.set_blocking(proc.fd, False)
            identity = ProcessIdentity.of(proc.pid)
            if identity is None:  # exited before we could look: still a real, finished process
                identity = ProcessIdentity(proc.pid, 0.0, boot_id())
            self.identity = identity
            loop.add_reader(proc.fd, self._read_available)
            self._pidfd = os.pidfd_open(proc.pid)
            loop.add_reader(self._pidfd, self._child_exited)
        except BaseException:
            self._abandon(proc)
            raise
        return identity

    # -- live upgrade (docs/protocol.md#live-upgrade) --------------------------------------

    def handover(self) -> dict[str, Any]:
        """What the code that takes this process over needs to go on watching it: the child
        (same pid: it stays this process's child across ``execve``) and the terminal's
        controlling side, a descriptor kept open over the exec."""
        proc = self._proc
        assert proc is not None and self.identity is not None
        return {"pid": int(proc.pid), "fd": int(proc.fd), "identity": self.identity.to_dict(),
                "rows": self.rows, "cols": self.cols, "job_leader": self._job_leader,
                "job_front_waited": self._job_front_waited, "eof": self._eof,
                "argv": self.argv}

    def handover_blocked(self) -> str | None:
        """Why this runtime cannot be handed over at this instant (None: it can). An exit
        already reaped but not yet reported (its terminal still drains) is settled within
        :data:`DRAIN_BOUND_S`; one being typed into is settled when the typing ends."""
        if self._proc is None or self._proc.fd < 0:
            return "its terminal is closed"
        if self.exit_status is not None:
            return "its exit is being reported"
        if self._input_claim is not None:
            return "input is being typed into it"
        return None

    def freeze_for_exec(self) -> None:
        """Stop watching (no reader, no pidfd) and let the terminal's descriptor survive the
        exec. The child is not touched: whatever it writes meanwhile waits in the terminal,
        and its exit waits as a zombie for the new code's ``waitpid``."""
        proc, loop = self._proc, self._loop
        assert proc is not None and proc.fd >= 0
        if loop is not None:
            loop.remove_reader(proc.fd)
            if self._pidfd is not None:
                loop.remove_reader(self._pidfd)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        os.set_inheritable(proc.fd, True)

    @classmethod
    def adopt(cls, handed: Mapping[str, Any], *, on_output: Callable[[bytes], None],
              on_exit: Callable[[ExitStatus], None]) -> PtyRuntime:
        """The runtime an earlier code of this process started (:meth:`handover`), watched
        again from here: output read from where the terminal holds it, and the exit seen
        through a new pidfd (a child that ended during the exec is a zombie: its pidfd is
        readable at once, and ``waitpid`` gives its true status)."""
        runtime = cls(list(handed["argv"]), env={}, cwd="/", rows=int(handed["rows"]),
                      cols=int(handed["cols"]), on_output=on_output, on_exit=on_exit,
                      job_leader=bool(handed["job_leader"]))
        runtime._job_front_waited = bool(handed["job_front_waited"])
        loop = asyncio.get_running_loop()
        runtime._loop = loop
        fd, pid = int(handed["fd"]), int(handed["pid"])
        os.set_inheritable(fd, False)
        os.set_blocking(fd, False)
        proc = PtyProcess(pid, fd)
        proc.argv = runtime.argv
        runtime._proc = proc
        identity = ProcessIdentity.from_dict(handed["identity"])
        runtime.identity = identity or ProcessIdentity(pid, 0.0, boot_id())
        runtime._eof = bool(handed["eof"])
        runtime._pidfd = os.pidfd_open(pid)
        loop.add_reader(runtime._pidfd, runtime._child_exited)
        if not runtime._eof:
            loop.add_reader(fd, runtime._read_available)
        return runtime

    def _abandon(self, proc: PtyProcess) -> None:
        """Kill and reap a child that cannot be watched, and release its terminal."""
        kernel.signal_all({proc.pid, *kernel.session_members(proc.pid)}, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait()  # reaps (SIGKILL cannot be ignored: at once)
        self.close()

    @property
    def fd(self) -> int | None:
        """The terminal's controlling side (for kernel questions), while it is open."""
        return None if self._proc is None or self._proc.fd < 0 else int(self._proc.fd)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self.exit_status is None

    # -- output ----------------------------------------------------------------------------

    def _read_available(self) -> bool:
        """Read what the PTY has now; returns False once the PTY is closed (EOF/EIO).

        A PTY hands over at most a few kilobytes per read (the line discipline's buffer), so
        one wake-up reads on until the PTY is empty, :data:`READ_BURST` bytes are in or
        :data:`READ_BUDGET_S` is spent, and passes them on at once: one journal write and one
        screen feed per burst instead of per 4 KB, and one event-loop round trip less per read.
        """
        proc = self._proc
        if proc is None or proc.fd < 0:
            return False
        chunks: list[bytes] = []
        total = 0
        closed = False
        clock = time.perf_counter
        until = clock() + READ_BUDGET_S
        while total < READ_BURST and clock() < until:
            try:
                data = os.read(proc.fd, PTY_READ_CHUNK)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.EIO:
                    log.warning("pty read failed: %s", exc)
                closed = True
                break
            if not data:
                closed = True
                break
            chunks.append(data)
            total += len(data)
        if chunks:
            self._on_output(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if closed:
            self._stop_reading()
            return False
        return True

    def read_pending(self) -> int | None:
        """Read now, to the end, what the program wrote that this side has not taken yet, and
        hand it to ``on_output`` (also while flow control paused reading: the screen takes it
        at its own pace). Returns how many bytes came; None when the end was not reached (the
        terminal closed, or more than :data:`READ_PENDING_CAP` bytes waited).

        A read that finds nothing makes the kernel hand over first what is still on its
        way (n_tty_read waits for the pending flip-buffer work before it says EAGAIN). So
        once the program was seen waiting for input, a count means that everything it wrote
        before has been read.
        """
        if self._proc is None or self._proc.fd < 0 or self._eof:
            return None
        total, emptied = self._read_out(READ_PENDING_CAP)
        return total if emptied else None

    def _read_out(self, cap: int | None = None) -> tuple[int, bool | None]:
        """Read what the terminal holds now, each chunk to ``on_output``, until a read finds
        it empty (True), it is closed (False: no writer is left), or ``cap`` bytes came
        (None). Returns the bytes read and which of those ended it."""
        fd = self._proc.fd if self._proc is not None else -1
        total = 0
        while cap is None or total < cap:
            try:
                data = os.read(fd, PTY_READ_CHUNK)
            except BlockingIOError:
                return total, True
            except OSError:  # EIO: no writer left
                return total, False
            if not data:
                return total, False
            total += len(data)
            self._on_output(data)
        return total, None

    def _at_eof(self) -> None:
        self._eof = True
        if self._loop is not None and self._proc is not None and self._proc.fd >= 0:
            self._loop.remove_reader(self._proc.fd)

    def _stop_reading(self) -> None:
        """EOF: nobody holds the terminal any more. Report a pending exit now."""
        self._at_eof()
        if self.exit_status is not None:
            self._report_exit()

    def set_reading(self, on: bool) -> None:
        """Pause (``False``) or resume reading output: the screen's flow control. While
        paused the program blocks on its next write once the PTY's buffer is full."""
        proc, loop = self._proc, self._loop
        if proc is None or loop is None or proc.fd < 0 or self._eof or on == self._reading:
            return
        self._reading = on
        if on:
            loop.add_reader(proc.fd, self._read_available)
        else:
            loop.remove_reader(proc.fd)

    def _drain(self) -> None:
        """Read everything written so far (NOTES: read until EOF before reporting an exit)."""
        proc = self._proc
        if proc is None or proc.fd < 0 or self._eof:
            return
        if self._read_out()[1] is False:
            self._at_eof()

    def _child_exited(self) -> None:
        """The pidfd says our process ended: reap it, then drain before reporting."""
        proc = self._proc
        if proc is None or self._loop is None or self._pidfd is None:
            return
        try:
            if proc.isalive():  # reaps: sets exitstatus / signalstatus
                return  # not yet (asked directly by end_session)
        except Exception:  # pragma: no cover - only if something else reaped our child
            log.exception("could not reap pid %s", proc.pid)
        self._loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None
        self.exit_status = ExitStatus(proc.exitstatus, proc.signalstatus)
        self._drain()
        if self._eof or proc.fd < 0:
            self._report_exit()
        else:
            # Children it left behind may still write: read on until EOF, within a bound.
            self._drain_timer = self._loop.call_later(DRAIN_BOUND_S, self._report_exit)

    def _report_exit(self) -> None:
        if self._exit_reported or self.exit_status is None:
            return
        self._exit_reported = True
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        self._drain()
        self._on_exit(self.exit_status)

    # -- input and control -----------------------------------------------------------------

    @contextlib.contextmanager
    def claim_input(self) -> Iterator[object]:
        """Hold this terminal's input lock: while held, every other write is refused with
        ``target_busy`` (nothing typed) instead of interleaving with ours.

        A prompt holds it from its readiness check through the typing to Enter, so two
        prompts cannot both find the program waiting and then type into each other. Refusing
        rather than queueing is deliberate: once the holder's Enter is typed the program is
        busy, and a queued input would land in the middle of its turn.
        """
        if self._input_claim is not None:
            raise TetherError(
                ErrorCode.TARGET_BUSY,
                "another input (a prompt, text, keys or a command) is being typed into this "
                "terminal right now; nothing was typed. Wait for the program's turn "
                "(wait_for_turn) and send again.",
                {"input_sent": False},
            )
        token = object()
        self._input_claim = token
        try:
            yield token
        finally:
            self._input_claim = None

    async def write(self, data: bytes, *, timeout_s: float, claim: object | None = None) -> int:
        """Write all of ``data`` to the PTY, waiting for room; returns bytes written.

        ``claim``: a token from :meth:`claim_input` held by the caller; without one the write
        takes the input lock for itself (``target_busy`` when someone else holds it).
        Raises TimeoutError (with ``.written`` set) when the program does not read its input
        within ``timeout_s``: the caller reports a partial, uncertain delivery.
        """
        if claim is None:
            with self.claim_input() as own:
                return await self.write(data, timeout_s=timeout_s, claim=own)
        if claim is not self._input_claim:
            raise TetherError(ErrorCode.TARGET_BUSY, "this terminal's input lock is no longer held",
                              {"input_sent": False})
        proc = self._proc
        if proc is None or proc.fd < 0:
            raise BrokenPipeError("runtime has no terminal")
        if self.on_input is not None:
            self.on_input(data)
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        written = 0
        deadline = loop.time() + timeout_s
        while written < len(data):
            try:
                written += os.write(proc.fd, view[written:])
                continue
            except BlockingIOError:
                pass
            await in_task()  # the wait below has a timeout (the caller may run eagerly)
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(proc.fd, _resolve, ready)
            try:
                await asyncio.wait_for(ready, max(0.0, deadline - loop.time()))
            except TimeoutError:
                err = TimeoutError(f"terminal accepted only {written} of {len(data)} bytes")
                err.written = written  # type: ignore[attr-defined]
                raise err from None
            finally:
                loop.remove_writer(proc.fd)
        return written

    def answer_query(self, data: bytes) -> None:
        """Best-effort write of an answer to a terminal query (cursor position, device
        attributes).

        Only a program that put the terminal in raw (or no-echo) mode can read an answer; in
        cooked, echoing mode the answer would be echoed back as garbage on the screen (``cat``
        of a recording full of queries), so it is not sent. A full input buffer means the
        program is not reading: dropping the answer then is what a real terminal does too.
        """
        proc = self._proc
        if proc is None or proc.fd < 0:
            return
        with contextlib.suppress(OSError, termios.error):
            lflag = termios.tcgetattr(proc.fd)[3]
            if lflag & termios.ICANON and lflag & termios.ECHO:
                return
            os.write(proc.fd, data)

    def kill_char(self) -> str:
        """The terminal's line-kill character (``stty kill``), or "" when it is disabled or
        cannot be read."""
        proc = self._proc
        if proc is None or proc.fd < 0:
            return ""
        try:
            char = termios.tcgetattr(proc.fd)[6][termios.VKILL]
        except (OSError, termios.error):
            return ""
        if not isinstance(char, bytes) or char in (b"", b"\0") or char[0] >= 0x20:
            return ""  # disabled, or a printable character that would be typed as text
        return char.decode("ascii")

    async def job_in_front(self, limit_s: float = JOB_FRONT_WAIT_S) -> None:
        """For a background command's leader (``job_leader``): wait until its job holds the
        terminal's foreground, at most ``limit_s`` (and :data:`JOB_FRONT_WAIT_S`), once.

        The leader forks the job and hands it the terminal a moment after it starts. A
        signal key typed before that reaches the leader's group instead: a leader still
        starting dies of it before the job runs, and one that has forked already waits on
        for its job, which never saw the key (a Ctrl-c sent right after the start was lost
        and the command ran on). After the first wait, whatever it found, this returns at
        once: a job that has held the terminal is what later keys are typed to, and a
        leader that kept it (a job stopped early) is not waited for again.
        """
        if not self._job_leader or self._job_front_waited:
            return
        self._job_front_waited = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(limit_s, JOB_FRONT_WAIT_S)
        while self.alive and (fd := self.fd) is not None and (pid := self.pid) is not None:
            try:
                if os.tcgetpgrp(fd) != pid:  # the leader's group is its pid: this is the job
                    return
            except OSError:
                return
            if loop.time() >= deadline:
                return
            await asyncio.sleep(JOB_FRONT_POLL_S)

    def signal_keys(self) -> bytes:
        """The characters the terminal turns into signals for the program in front instead of
        queueing them (interrupt, quit, suspend), when it does (ISIG); else none."""
        proc = self._proc
        if proc is None or proc.fd < 0:
            return b""
        try:
            attrs = termios.tcgetattr(proc.fd)
        except (OSError, termios.error):
            return b""
        if not attrs[3] & termios.ISIG:
            return b""
        chars = attrs[6]
        return b"".join(chars[i] for i in (termios.VINTR, termios.VQUIT, termios.VSUSP)
                        if isinstance(chars[i], bytes) and chars[i] != b"\0")

    def unread_input(self) -> int | None:
        """Bytes typed into the terminal that no program has read yet (its input queue; in
        line mode, whole lines), or None when that cannot be asked."""
        proc = self._proc
        if proc is None or proc.fd < 0:
            return None
        try:
            # The terminal's own end, from the master (never this process's controlling one).
            peer = fcntl.ioctl(proc.fd, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return int(struct.unpack("i", fcntl.ioctl(peer, termios.FIONREAD, b"\0" * 4))[0])
        except OSError:
            return None
        finally:
            os.close(peer)

    def input_mode(self) -> str | None:
        """How the program has set up the terminal's input, read from the PTY's termios.

        ``raw``: key at a time (``ICANON`` off) — a full-screen program that reads keys.
        ``cooked``: line at a time with echo — a shell reading a line, or a program that has not
        yet switched to raw mode (Claude Code draws its first dialog about 0.3 s before it does,
        and the switch flushes whatever was typed). ``cooked_no_echo``: line at a time without
        echo (a password prompt). ``None``: the terminal is gone.
        """
        proc = self._proc
        if proc is None or proc.fd < 0:
            return None
        try:
            lflag = termios.tcgetattr(proc.fd)[3]
        except (OSError, termios.error):
            return None
        if not lflag & termios.ICANON:
            return "raw"
        return "cooked" if lflag & termios.ECHO else "cooked_no_echo"

    def resize(self, rows: int, cols: int) -> None:
        """Set the window size; the kernel sends SIGWINCH to the foreground process group."""
        self.rows, self.cols = rows, cols
        if self._proc is not None and self.alive:
            self._proc.setwinsize(rows, cols)

    def hangup(self) -> None:
        """What a closing terminal does: SIGHUP (and SIGCONT so stopped jobs see it) to every
        process of the runtime's session, whatever process group it is in.

        A job's leader is spared: it ends with its job (and its status), so a job that
        ignores the hangup is not reported ended while it runs (see :data:`_JOB_WRAPPER`)."""
        pid = self.pid
        if pid is None:
            return
        members = {pid, *kernel.session_members(pid)} if self.exit_status is None else set(
            kernel.session_members(pid))
        if self._job_leader:
            members.discard(pid)
        kernel.signal_all(members, signal.SIGHUP)
        kernel.signal_all(members, signal.SIGCONT)

    async def end_session(self, grace_s: float) -> list[int]:
        """End the whole session (SIGHUP, then SIGKILL after ``grace_s``), reap the leader
        and report its exit. Returns the pids that survived."""
        pid = self.pid
        if pid is None:
            return []
        survivors = await kernel.end_session(pid, grace_s)
        self.session_ended()
        return survivors

    def session_ended(self) -> None:
        """The whole session was ended (``end_session``, or ``kernel.end_sessions`` for many
        runtimes at once): reap the leader now and report its exit."""
        self._child_exited()  # reap now if the pidfd callback has not run yet
        self._report_exit()  # everything that held the terminal is gone: nothing to drain

    def close(self) -> None:
        """Release the PTY fd and watchers without blocking (never ptyprocess.close)."""
        loop, proc = self._loop, self._proc
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        if loop is not None and self._pidfd is not None:
            loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if proc is not None and proc.fd >= 0:
            if loop is not None:
                loop.remove_reader(proc.fd)
            with contextlib.suppress(OSError):
                proc.fileobj.close()  # owns the fd: closing it here avoids a double close
            proc.fd = -1
            # Tell ptyprocess it is closed so its __del__ does not sleep or kill.
            proc.closed = True
