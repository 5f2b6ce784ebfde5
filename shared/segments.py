"""Where output journals keep their bytes, readable without a running guardian.

A journal is a chain of segment files ``<execution_id>.<base>.seg``, ``base`` being the
absolute offset of the segment's first byte. The first segment holds the head (the first
64 KiB) and is kept; the others hold the tail's size each, and those wholly before the last
1 MiB are deleted (:class:`Window` says what is kept). The guardian appends to them
(``guardian/history/journal.py``); whoever reconciles a dead guardian's records reads the
figures from the same files, so a lost record still says how much output it has
(docs/tools.md#unknown-is-not-success, docs/tools.md#retention).

The segments of an execution whose record holds its output figures are found by name
(:func:`find_segments`): listing the journals directory, which holds every retained
execution's files, cost a read of a finished execution milliseconds per thousand files.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.protocol.limits import EXECUTION_HEAD_BYTES, EXECUTION_RETAIN_BYTES

#: Output retained per execution (docs/tools.md#retention): the last 1 MiB (the tail) ...
DEFAULT_RETAIN_BYTES = EXECUTION_RETAIN_BYTES
#: ... and the first 64 KiB (the head).
DEFAULT_HEAD_BYTES = EXECUTION_HEAD_BYTES

#: A record's ``(output_start, output_end)``: the window of its journal.
Figures = tuple[int, int]


@dataclass(frozen=True, slots=True)
class OutputSizes:
    """How much of each execution's output its journal keeps: the first ``head`` bytes and
    the last ``tail`` (``shared/config``: TETHER_OUTPUT_HEAD_BYTES, TETHER_OUTPUT_TAIL_BYTES)."""

    head: int = DEFAULT_HEAD_BYTES
    tail: int = DEFAULT_RETAIN_BYTES


@dataclass(slots=True)
class Segment:
    base: int
    path: Path
    size: int


@dataclass(frozen=True, slots=True)
class Window:
    """What a journal keeps: the bytes from ``start`` to ``end`` and, when ``start`` is past
    it, the first ``head`` bytes too; the bytes between ``head`` and ``start`` were dropped
    (a gap, which a read that crosses it reports). ``start`` 0: nothing was dropped (and
    ``head`` is 0)."""

    start: int
    end: int
    head: int = 0

    @property
    def figures(self) -> Figures:
        """``(output_start, output_end)`` as a record keeps them (the head is implied: the
        first bytes, up to the head size, whenever ``output_start`` is past 0)."""
        return self.start, self.end

    @property
    def retained(self) -> int:
        return self.end - self.start + self.head

    def resume(self, offset: int) -> tuple[int, int]:
        """Where a read from absolute ``offset`` goes on (the first kept byte at or after
        it), and how many dropped bytes it skips to get there (the gap it reports)."""
        if offset < self.head or offset >= self.start:
            return offset, 0
        return self.start, self.start - offset

    def run_end(self, offset: int) -> int:
        """Where the kept bytes that ``offset`` (a kept byte) is in end: a read stops there,
        before the gap, so that offsets and bytes never slip past one another."""
        return self.head if offset < self.head else self.end


def segment_capacity(base: int, retain: int, head: int) -> int:
    """How many bytes the segment starting at ``base`` takes: the head segment (at 0) the
    head, every other one the tail's size. So segments start at 0, ``head``,
    ``head + retain``, ``head + 2 retain`` ...; with no head at 0, ``retain`` ..."""
    return head if base == 0 and head > 0 else retain


def segment_path(directory: Path, execution_id: str, base: int) -> Path:
    return directory / f"{execution_id}.{base:016d}.seg"


def scan_segments(directory: Path, execution_id: str) -> list[Segment]:
    """The segments on disk, oldest first."""
    segments = []
    for path in directory.glob(f"{execution_id}.*.seg"):
        try:
            base = int(path.name.split(".")[-2])
            size = path.stat().st_size
        except (ValueError, OSError):
            continue
        segments.append(Segment(base, path, size))
    segments.sort(key=lambda s: s.base)
    return segments


def find_segments(
    directory: Path, execution_id: str, figures: Figures | None,
    retain: int = DEFAULT_RETAIN_BYTES, head: int = DEFAULT_HEAD_BYTES,
) -> list[Segment]:
    """The segments on disk, oldest first: where the record's ``figures`` put them (see
    :func:`probe_segments`), else (no figures, or not there) by listing the directory."""
    if figures is not None:
        found = probe_segments(directory, execution_id, figures, retain, head)
        if found is not None:
            return found
    return scan_segments(directory, execution_id)


def probe_segments(
    directory: Path, execution_id: str, figures: Figures, retain: int = DEFAULT_RETAIN_BYTES,
    head: int = DEFAULT_HEAD_BYTES,
) -> list[Segment] | None:
    """The segments that hold a record's window ``figures = (output_start, output_end)``,
    found by name without listing the directory; None when they are not what the figures
    say (then the caller lists it).

    A journal starts its next segment when the last one is full (:func:`segment_capacity`),
    so the window's tail (the last ``retain`` bytes) lies in the last two segments, and its
    head in the first. Anything else (a segment a full disk made start at another offset, a
    journal of other retention sizes, figures that are not the disk's: bytes held in memory
    and never written) fails the check against the figures.
    """
    start, end = figures
    bases = {0} if head > 0 else set()  # the head's segment
    if end > head or not head:  # and the last two of the tail's size
        last = max(0, end - 1 - head) // retain
        bases.update(head + index * retain for index in (last - 1, last) if index >= 0)
    segments = []
    for base in sorted(bases):
        path = segment_path(directory, execution_id, base)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        except OSError:
            return None
        segments.append(Segment(base, path, size))
    tail = [segment for segment in segments if segment.base or not head]
    if not segments or any(a.base + a.size != b.base for a, b in itertools.pairwise(tail)):
        return None
    return segments if window(segments, retain, head).figures == (start, end) else None


def delete_segments(
    directory: Path, victims: Mapping[str, Figures | None],
    retain: int = DEFAULT_RETAIN_BYTES, head: int = DEFAULT_HEAD_BYTES,
) -> None:
    """Remove every segment of these executions (id -> the record's output figures): by name
    where the figures say where they are, and the others listing the directory once (a scan
    per execution lists it whole each time: a prune of a long history was quadratic in it)."""
    wanted = set()
    for execution_id, figures in victims.items():
        found = None if figures is None else probe_segments(directory, execution_id, figures,
                                                            retain, head)
        if found is None:
            wanted.add(execution_id)
        for segment in found or ():
            with contextlib.suppress(FileNotFoundError):
                segment.path.unlink()
    if not wanted:
        return
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return
    for entry in entries:
        execution_id, dot, rest = entry.name.partition(".")
        if dot and execution_id in wanted and rest.endswith(".seg"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def window(segments: list[Segment], retain: int = DEFAULT_RETAIN_BYTES,
           head: int = DEFAULT_HEAD_BYTES) -> Window:
    """The retained window of a chain of segments: the last ``retain`` bytes of the run of
    contiguous segments that ends the chain, and the first ``head`` bytes when the first
    segment holds them (its base is 0)."""
    if not segments:
        return Window(0, 0)
    end = segments[-1].base + segments[-1].size
    run = len(segments) - 1
    while run > 0 and segments[run - 1].base + segments[run - 1].size == segments[run].base:
        run -= 1
    start = max(segments[run].base, end - retain)
    first = segments[0]
    kept = min(first.size, head) if head > 0 and first.base == 0 else 0
    if start <= kept:  # then the run begins at 0: nothing was dropped
        return Window(0, end)
    return Window(start, end, kept)


def retained_bytes(figures: Figures, head: int = DEFAULT_HEAD_BYTES) -> int:
    """The output bytes a record's journal keeps, from its figures alone: its tail, and
    the head when bytes were dropped after it."""
    start, end = figures
    return end - start + (min(head, start) if start > 0 else 0)


def journal_figures(directory: Path, execution_id: str) -> tuple[int, int] | None:
    """``(output_start, output_end)`` of an execution's journal, or None without one."""
    segments = scan_segments(directory, execution_id)
    return window(segments).figures if segments else None
