"""Output journals: raw PTY bytes per execution, with absolute byte offsets (SPEC R17).

A journal is a short chain of segment files named ``<execution_id>.<base>.seg`` where
``base`` is the absolute offset of the segment's first byte. Appends go to the newest
segment with one ``write`` (no buffering in this process, so a guardian crash loses nothing
the child wrote). When the newest segment reaches the retention size a new one starts and
segments wholly before the retention window are deleted, so the head is dropped in O(1)
without ever rewriting retained bytes. The logical window is exactly the last ``retain``
bytes; everything before ``start`` is a gap that readers report, never hide.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether.shared.segments import DEFAULT_RETAIN_BYTES, scan_segments, segment_path, window
from tether.shared.segments import Segment as _Segment

__all__ = ["DEFAULT_RETAIN_BYTES", "Journal"]


class Journal:
    """The append-only output journal of one execution."""

    def __init__(
        self, directory: Path, execution_id: str, retain: int = DEFAULT_RETAIN_BYTES,
        *, new: bool = False,
    ) -> None:
        """``new``: the execution was just created, so there is nothing on disk to find
        (the scan lists the whole journals directory: not on a command's path)."""
        self.directory = directory
        self.execution_id = execution_id
        self.retain = retain
        self._segments: list[_Segment] = [] if new else self._scan()
        if not self._segments:
            self._segments.append(self._new_segment(0))
        self._fd: int | None = None

    # -- figures ---------------------------------------------------------------------------

    @property
    def end(self) -> int:
        """Absolute offset one past the last byte ever written."""
        last = self._segments[-1]
        return last.base + last.size

    @property
    def start(self) -> int:
        """Absolute offset of the first retained byte (bytes before it were dropped)."""
        return window(self._segments, self.retain)[0]

    @property
    def retained(self) -> int:
        return self.end - self.start

    # -- writing ---------------------------------------------------------------------------

    def append(self, data: bytes) -> None:
        """Append raw bytes. The only thing the PTY reader does with output."""
        view = memoryview(data)
        while view:
            last = self._segments[-1]
            room = self.retain - last.size
            if room <= 0:
                self._roll()
                continue
            piece = view[:room]
            fd = self._writer()
            written = os.write(fd, piece)
            last.size += written
            view = view[written:]

    def _writer(self) -> int:
        if self._fd is None:
            seg = self._segments[-1]
            self._fd = os.open(seg.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        return self._fd

    def _roll(self) -> None:
        self.close()
        self._segments.append(self._new_segment(self.end))
        # Keep only segments that still hold bytes inside the retention window.
        window_start = self.end - self.retain
        while len(self._segments) > 1 and (
            self._segments[0].base + self._segments[0].size <= window_start
        ):
            dropped = self._segments.pop(0)
            dropped.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Close the write handle (reads keep working)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        """Remove every segment (the record was pruned)."""
        self.close()
        for seg in self._segments:
            seg.path.unlink(missing_ok=True)
        self._segments = [_Segment(self.end, self._segment_path(self.end), 0)]

    # -- reading ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` retained bytes from absolute ``offset`` (clamped to the window)."""
        offset = max(offset, self.start)
        stop = min(self.end, offset + max_bytes)
        chunks: list[bytes] = []
        for seg in self._segments:
            seg_end = seg.base + seg.size
            if seg_end <= offset or seg.base >= stop:
                continue
            lo = max(offset, seg.base) - seg.base
            hi = min(stop, seg_end) - seg.base
            try:
                with open(seg.path, "rb") as fh:
                    fh.seek(lo)
                    chunks.append(fh.read(hi - lo))
            except FileNotFoundError:
                continue  # pruned concurrently: a gap, reported by the caller's figures
        return b"".join(chunks)

    # -- files -----------------------------------------------------------------------------

    def _segment_path(self, base: int) -> Path:
        return segment_path(self.directory, self.execution_id, base)

    def _new_segment(self, base: int) -> _Segment:
        return _Segment(base, self._segment_path(base), 0)

    def _scan(self) -> list[_Segment]:
        """Find existing segments (a journal reopened by a later guardian)."""
        return scan_segments(self.directory, self.execution_id)
