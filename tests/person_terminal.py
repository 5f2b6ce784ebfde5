"""A person's terminal for tests: a ``tether`` command in a real PTY, its output drawn by pyte."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pyte
from ptyprocess import PtyProcess

from tests.helpers import poll

TETHER = str(Path(sys.executable).with_name("tether"))


class PersonTerminal:
    """Runs ``tether <args>`` in a PTY of ``rows`` x ``cols``; a thread draws what it prints."""

    def __init__(self, args: list[str], rows: int = 50, cols: int = 120) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        self._lock = threading.Lock()
        self.proc = PtyProcess.spawn([TETHER, *args], dimensions=(rows, cols),
                                     env=dict(os.environ))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.proc.fd, 65536)
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self.raw += data
                self.stream.feed(data)

    def display(self) -> str:
        with self._lock:
            return "\n".join(line.rstrip() for line in self.screen.display)

    def cursor(self) -> tuple[int, int]:
        with self._lock:
            return self.screen.cursor.y, self.screen.cursor.x

    def output(self) -> bytes:
        with self._lock:
            return bytes(self.raw)

    def wait_for(self, text: str, timeout: float = 15.0) -> str:
        def shown() -> str | None:
            display = self.display()
            return display if text in display else None

        try:
            return poll(shown, timeout=timeout, what=f"{text!r} on the person's screen")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen shows:\n{self.display()}") from None

    def title(self) -> str:
        with self._lock:
            return str(self.screen.title)

    def resize(self, rows: int, cols: int) -> None:
        """Resize the person's terminal: the kernel sends the command SIGWINCH."""
        with self._lock:
            self.screen.resize(rows, cols)
        self.proc.setwinsize(rows, cols)

    def type(self, data: bytes) -> None:
        os.write(self.proc.fd, data)

    def wait_exit(self, timeout: float = 15.0) -> int:
        poll(lambda: not self.proc.isalive(), timeout=timeout, what="tether to exit")
        self._reader.join(timeout=5)
        return int(self.proc.exitstatus if self.proc.exitstatus is not None else -1)

    def close(self) -> None:
        if self.proc.isalive():
            self.proc.terminate(force=True)
