"""Journal reads: the segment being written is read through the writer's descriptor, older
segments (and a closed or reopened journal) from their files; both give the same bytes."""

from __future__ import annotations

from pathlib import Path

from tether.guardian.history.journal import Journal

KIB = 1024


def test_reads_match_what_was_written_whichever_way_they_are_read(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "ex_reads", retain=64 * KIB)
    data = bytes(i % 251 for i in range(160 * KIB))  # 2.5 windows: three segments, one dropped
    for i in range(0, len(data), 3000):
        journal.append(data[i : i + 3000])
    start = journal.start
    assert (start, journal.end) == (len(data) - 64 * KIB, len(data))
    window = data[start:]
    live = journal.read(start, 64 * KIB)  # spans an older segment and the one being written
    middle = journal.read(start + 50 * KIB, 10 * KIB)
    journal.close()  # no writer left: every segment from its file
    assert journal.read(start, 64 * KIB) == live == window
    assert middle == window[50 * KIB : 60 * KIB]
    reopened = Journal(tmp_path, "ex_reads", retain=64 * KIB)
    assert reopened.read(start, 64 * KIB) == window
    journal.append(b"more")  # the writer reopens; its new bytes are read back too
    assert journal.read(len(data), 10) == b"more"
