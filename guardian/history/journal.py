"""Output journals: raw PTY bytes per execution, with absolute byte offsets (docs/tools.md#retention).

A journal is a short chain of segment files named ``<execution_id>.<base>.seg`` where
``base`` is the absolute offset of the segment's first byte. Appends go to the newest
segment with one ``write`` (no buffering in this process, so a guardian crash loses nothing
the child wrote). The first segment takes the head (the first ``head`` bytes, 64 KiB) and
is kept for the journal's life: where a long build log's first error usually is. Each later
one takes ``retain`` bytes (the tail's size, 1 MiB); when the newest is full a new one
starts and segments wholly before the tail's window are deleted, so the middle is dropped
in O(1) without ever rewriting retained bytes. The logical window is exactly the head and
the last ``retain`` bytes; everything between them is a gap that readers report, never
hide (``shared.segments.Window``).

Appending never raises: bytes the disk refuses (full, I/O error) are held in memory — at most
the retention window of them — readable like the rest, and written by the next append or
:meth:`Journal.flush`, so the PTY reader survives a full disk and the offsets stay true.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether.shared.segments import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_RETAIN_BYTES,
    Figures,
    Window,
    find_segments,
    segment_capacity,
    segment_path,
    window,
)
from tether.shared.segments import Segment as _Segment

__all__ = ["DEFAULT_HEAD_BYTES", "DEFAULT_RETAIN_BYTES", "Journal", "SpareFile"]


class Journal:
    """The append-only output journal of one execution."""

    def __init__(
        self, directory: Path, execution_id: str, retain: int = DEFAULT_RETAIN_BYTES,
        *, head: int = DEFAULT_HEAD_BYTES, new: bool = False, figures: Figures | None = None,
    ) -> None:
        """``retain``: the tail kept (the last bytes); ``head``: the first bytes kept (0:
        none). ``new``: the execution was just created, so there is nothing on disk to find.
        ``figures``: its record's ``(output_start, output_end)``, which say where its
        segments are; without them (or when they are not there) the whole journals
        directory is listed to find them: never on a command's path, nor a read's."""
        self.directory = directory
        self.execution_id = execution_id
        self.retain = retain
        self.head = head
        self._segments: list[_Segment] = [] if new else find_segments(
            directory, execution_id, figures, retain, head)
        if not self._segments:
            self._segments.append(self._new_segment(0))
        self._fd: int | None = None
        # Bytes accepted but not on disk yet, and the absolute offset of the first of them.
        self._held = bytearray()
        self._held_base = 0
        self.write_error: OSError | None = None

    # -- figures ---------------------------------------------------------------------------

    @property
    def end(self) -> int:
        """Absolute offset one past the last byte ever appended (on disk or still held)."""
        return self._held_base + len(self._held) if self._held else self._disk_end

    @property
    def _disk_end(self) -> int:
        last = self._segments[-1]
        return last.base + last.size

    @property
    def window(self) -> Window:
        """What is kept: the head, and the tail from :attr:`start` (held bytes included)."""
        segments = self._segments
        if self._held:  # the held bytes go on from the disk's end, or after a drop
            segments = [*segments, _Segment(self._held_base, self._segments[-1].path,
                                            len(self._held))]
        return window(segments, self.retain, self.head)

    @property
    def start(self) -> int:
        """Absolute offset of the first retained byte after the gap (0: nothing dropped;
        else the first ``head`` bytes are kept as well)."""
        return self.window.start

    @property
    def retained(self) -> int:
        return self.window.retained

    def resume(self, offset: int) -> tuple[int, int]:
        """Where a read from ``offset`` goes on, and the dropped bytes it skips (the gap a
        page reports): :meth:`Window.resume`."""
        return self.window.resume(offset)

    @property
    def unwritten(self) -> int:
        """Bytes held in memory because the disk refused them."""
        return len(self._held)

    # -- writing ---------------------------------------------------------------------------

    def append(self, data: bytes) -> None:
        """Append raw bytes. The only thing the PTY reader does with output. Never raises."""
        if self._held:
            self._held += data
            self._trim_held()
            self.flush()
            return
        written = self._write(memoryview(data))
        if written < len(data):
            self._held_base = self._disk_end
            self._held = bytearray(data[written:])
            self._trim_held()

    def flush(self) -> bool:
        """Write the held bytes if the disk takes them now; True when none are left."""
        if not self._held:
            return True
        if self._held_base != self._disk_end:
            # More than the window was held: the bytes in between were dropped for good.
            self._start_segment(self._held_base)
        written = self._write(memoryview(bytes(self._held)))  # a copy: _held is resized
        del self._held[:written]
        self._held_base += written
        if not self._held:
            self.write_error = None
        return not self._held

    def _trim_held(self) -> None:
        excess = len(self._held) - self.retain
        if excess > 0:
            del self._held[:excess]
            self._held_base += excess

    def _write(self, view: memoryview) -> int:
        """Write as much of ``view`` as the disk takes; returns how much that was."""
        total = 0
        try:
            while view:
                last = self._segments[-1]
                room = segment_capacity(last.base, self.retain, self.head) - last.size
                if room <= 0:
                    self._start_segment(self._disk_end)
                    continue
                written = os.write(self._writer(), view[:room])
                last.size += written
                total += written
                view = view[written:]
        except OSError as exc:
            self.write_error = exc.with_traceback(None)  # keep no frame (and no buffer) alive
            self.close()  # reopen on the next try
        return total

    def _writer(self) -> int:
        if self._fd is None:
            seg = self._segments[-1]
            # Read-write: reads of this segment use it too (O_APPEND moves only writes).
            self._fd = os.open(seg.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        return self._fd

    def _start_segment(self, base: int) -> None:
        self.close()
        self._segments.append(self._new_segment(base))
        # Keep the head's segment and the segments that still hold bytes of the tail.
        window_start = self.end - self.retain
        oldest = 1 if self.head > 0 and self._segments[0].base == 0 else 0
        while len(self._segments) > oldest + 1 and (
            self._segments[oldest].base + self._segments[oldest].size <= window_start
        ):
            dropped = self._segments.pop(oldest)
            dropped.path.unlink(missing_ok=True)

    def open(self, spare: SpareFile | None = None) -> None:
        """Open the newest segment's write handle now (creating its file), not at the first
        append: ``spare``'s file, renamed, when it has one. Best effort: a disk that refuses
        it refuses that append too, and the bytes are held as for any refused write."""
        if self._fd is None and spare is not None:
            self._fd = spare.take(self._segments[-1].path)
        try:
            self._writer()
        except OSError as exc:
            self.write_error = exc.with_traceback(None)

    def close(self) -> None:
        """Close the write handle (reads keep working)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- reading ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` retained bytes from absolute ``offset`` (moved past a gap it
        falls in, as :meth:`resume` says), never across a gap: a read in the head stops at
        its end, so the bytes returned are exactly those from the offset on."""
        kept = self.window
        offset = kept.resume(offset)[0]
        stop = min(kept.run_end(offset), offset + max_bytes)
        chunks: list[bytes] = []
        for seg in self._segments:
            seg_end = seg.base + seg.size
            if seg_end <= offset or seg.base >= stop:
                continue
            lo = max(offset, seg.base) - seg.base
            hi = min(stop, seg_end) - seg.base
            if seg is self._segments[-1] and self._fd is not None:
                # The segment being written: read through the writer's own descriptor
                # (observe of 32 running programs would otherwise open 32 files per call).
                chunks.append(os.pread(self._fd, hi - lo, lo))
                continue
            try:
                fd = os.open(seg.path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # pruned concurrently: a gap, reported by the caller's figures
            try:
                chunks.append(os.pread(fd, hi - lo, lo))
            finally:
                os.close(fd)
        if self._held and stop > self._held_base:
            lo = max(offset, self._held_base) - self._held_base
            chunks.append(bytes(self._held[lo : stop - self._held_base]))
        return b"".join(chunks)

    # -- files -----------------------------------------------------------------------------

    def _segment_path(self, base: int) -> Path:
        return segment_path(self.directory, self.execution_id, base)

    def _new_segment(self, base: int) -> _Segment:
        return _Segment(base, self._segment_path(base), 0)


class SpareFile:
    """One empty file in the journals directory, created ahead of need and renamed into a new
    journal's first segment.

    Creating a file costs the file system an inode, and that can be slow: 36 µs in a fresh
    directory of the development machine, 130-250 µs in a guardian's journals directory
    after weeks of churn, against about 30 µs for renaming one that exists. A command's
    journal is created on its path (while the shell runs it); the spare moves that cost to
    after the reply. Its name (``.spare``) is nobody's segment; one a dead guardian left
    (always empty: it is renamed before any byte goes into it) is simply used again. Only
    the guardian that holds the directory's lock makes and takes it: the descriptor kept
    here still names ``.spare`` when it is taken.
    """

    NAME = ".spare"

    def __init__(self, directory: Path) -> None:
        self.path = directory / self.NAME
        self._fd: int | None = None

    def take(self, path: Path) -> int | None:
        """The spare file, renamed to ``path``: its descriptor (read-write, appending), or
        None when there is no spare or it cannot be moved there."""
        fd, self._fd = self._fd, None
        if fd is None:
            return None
        try:
            os.rename(self.path, path)
        except OSError:
            os.close(fd)
            return None
        return fd

    def refill(self) -> None:
        """Create the spare if there is none (best effort: without one the next journal
        creates its own file, as before)."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        try:
            if os.fstat(fd).st_size:  # not ours to keep bytes in: start it empty
                os.ftruncate(fd, 0)
        except OSError:
            os.close(fd)
            return
        self._fd = fd

    def close(self) -> None:
        """Close the descriptor; the file stays for the next guardian."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
