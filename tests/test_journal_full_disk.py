"""A journal on a disk that fills up and frees again (issue 11): appending never raises,
the refused bytes stay readable in memory, and they reach the disk once there is room."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import small_tmpfs
from tether.guardian.history.journal import Journal
from tether.shared.segments import journal_figures

KIB = 1024


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (needs root; CI runs as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    with small_tmpfs(mount, "size=64k") as disk:
        yield disk


def _grow(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=8m", str(mount)], check=True)


def test_full_disk_holds_bytes_until_there_is_room(tiny_disk: Path) -> None:
    journal = Journal(tiny_disk, "ex_full", retain=256 * KIB)
    data = bytes(range(256)) * (200 * KIB // 256)
    for i in range(0, len(data), 4 * KIB):
        journal.append(data[i : i + 4 * KIB])  # never raises, although the disk fills
    assert journal.unwritten > 0
    assert journal.write_error is not None
    assert (journal.start, journal.end) == (0, len(data))
    assert journal.read(0, len(data)) == data  # held bytes are readable too
    assert journal.flush() is False  # still no room
    _grow(tiny_disk)
    assert journal.flush() is True
    journal.close()
    assert journal_figures(tiny_disk, "ex_full") == (0, len(data))
    assert Journal(tiny_disk, "ex_full", retain=256 * KIB).read(0, len(data)) == data


def test_more_than_the_window_held_keeps_the_last_window(tiny_disk: Path) -> None:
    journal = Journal(tiny_disk, "ex_long", retain=128 * KIB)
    data = os.urandom(512 * KIB)
    for i in range(0, len(data), 8 * KIB):
        journal.append(data[i : i + 8 * KIB])
    assert journal.end == len(data)
    assert journal.start == len(data) - 128 * KIB
    assert journal.read(journal.start, 128 * KIB) == data[-128 * KIB :]
    _grow(tiny_disk)
    assert journal.flush() is True
    journal.close()
    reopened = Journal(tiny_disk, "ex_long", retain=128 * KIB)
    assert (reopened.start, reopened.end) == (len(data) - 128 * KIB, len(data))
    assert reopened.read(reopened.start, 128 * KIB) == data[-128 * KIB :]
