"""Where output journals keep their bytes, readable without a running guardian.

A journal is a chain of segment files ``<execution_id>.<base>.seg``, ``base`` being the
absolute offset of the segment's first byte. The guardian appends to them
(``guardian/history/journal.py``); whoever reconciles a dead guardian's records reads the
figures from the same files, so a lost record still says how much output it has (R13, R17).

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

from tether.protocol.limits import EXECUTION_RETAIN_BYTES

#: Output retained per execution (R17): the last 1 MiB.
DEFAULT_RETAIN_BYTES = EXECUTION_RETAIN_BYTES

#: A record's ``(output_start, output_end)``: the window of its journal.
Figures = tuple[int, int]


@dataclass(slots=True)
class Segment:
    base: int
    path: Path
    size: int


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
    retain: int = DEFAULT_RETAIN_BYTES,
) -> list[Segment]:
    """The segments on disk, oldest first: where the record's ``figures`` put them (see
    :func:`probe_segments`), else (no figures, or not there) by listing the directory."""
    if figures is not None:
        found = probe_segments(directory, execution_id, figures, retain)
        if found is not None:
            return found
    return scan_segments(directory, execution_id)


def probe_segments(
    directory: Path, execution_id: str, figures: Figures, retain: int = DEFAULT_RETAIN_BYTES,
) -> list[Segment] | None:
    """The segments that hold a record's window ``figures = (output_start, output_end)``,
    found by name without listing the directory; None when they are not what the figures
    say (then the caller lists it).

    A journal starts its next segment when the last one holds ``retain`` bytes, so segments
    start at 0, ``retain``, 2 ``retain`` ..., and the window (the last ``retain`` bytes) lies
    in the last two. Anything else (a segment a full disk made start at another offset, a
    journal of another retention size, figures that are not the disk's: bytes held in memory
    and never written) fails the check against the figures.
    """
    start, end = figures
    last = max(0, end - 1) // retain
    segments = []
    for index in (last - 1, last):
        if index < 0:
            continue
        path = segment_path(directory, execution_id, index * retain)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        except OSError:
            return None
        segments.append(Segment(index * retain, path, size))
    if not segments or any(a.base + a.size != b.base for a, b in itertools.pairwise(segments)):
        return None
    return segments if window(segments, retain) == (start, end) else None


def delete_segments(
    directory: Path, victims: Mapping[str, Figures | None],
    retain: int = DEFAULT_RETAIN_BYTES,
) -> None:
    """Remove every segment of these executions (id -> the record's output figures): by name
    where the figures say where they are, and the others listing the directory once (a scan
    per execution lists it whole each time: a prune of a long history was quadratic in it)."""
    wanted = set()
    for execution_id, figures in victims.items():
        found = None if figures is None else probe_segments(directory, execution_id, figures,
                                                            retain)
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


def window(segments: list[Segment], retain: int = DEFAULT_RETAIN_BYTES) -> tuple[int, int]:
    """``(start, end)``: the retained window of a chain of segments."""
    if not segments:
        return 0, 0
    end = segments[-1].base + segments[-1].size
    return max(segments[0].base, end - retain), end


def journal_figures(directory: Path, execution_id: str) -> tuple[int, int] | None:
    """``(output_start, output_end)`` of an execution's journal, or None without one."""
    segments = scan_segments(directory, execution_id)
    return window(segments) if segments else None
