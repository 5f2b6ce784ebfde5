"""Where output journals keep their bytes, readable without a running guardian.

A journal is a chain of segment files ``<execution_id>.<base>.seg``, ``base`` being the
absolute offset of the segment's first byte. The guardian appends to them
(``guardian/history/journal.py``); whoever reconciles a dead guardian's records reads the
figures from the same files, so a lost record still says how much output it has (R13, R17).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tether.protocol.limits import EXECUTION_RETAIN_BYTES

#: Output retained per execution (R17): the last 1 MiB.
DEFAULT_RETAIN_BYTES = EXECUTION_RETAIN_BYTES


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


def delete_segments(directory: Path, execution_ids: Iterable[str]) -> None:
    """Remove every segment of these executions, listing the directory once (a scan per
    execution lists it whole each time: a prune of a long history was quadratic in it)."""
    wanted = set(execution_ids)
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
