"""The first bytes of a long output are kept too (issue 31, defect 5).

Retention kept the last 1 MiB of an execution and nothing else: the start of a long build
log, where its first error usually is, was gone. A journal keeps its first 64 KiB as well;
the bytes between are dropped, and a read that crosses them reports the gap.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import guardian_thread, listings
from tether.guardian.history.journal import Journal
from tether.protocol.method_table import EXEC_GET, EXEC_READ, EXEC_START, EXEC_STATUS
from tether.shared.config import Config
from tether.shared.segments import OutputSizes, delete_segments, retained_bytes, scan_segments

pytestmark = pytest.mark.anyio

KIB, MIB = 1024, 1024 * 1024
HEAD, TAIL = 64 * KIB, MIB


def _numbered(size: int) -> bytes:
    """At least ``size`` bytes of numbered lines, as a terminal writes them (CR LF)."""
    lines, total, i = [], 0, 0
    while total < size:
        line = f"line {i:08d}\r\n".encode()
        lines.append(line)
        total += len(line)
        i += 1
    return b"".join(lines)


def _read_all(journal: Journal, page: int = 48 * KIB) -> list[tuple[int, int, bytes]]:
    """Every page from offset 0 as Execution.read takes them: ``(start, gap, bytes)``."""
    pages, offset = [], 0
    while offset < journal.end:
        offset, gap = journal.resume(offset)
        data = journal.read(offset, page)
        assert data, offset
        pages.append((offset, gap, data))
        offset += len(data)
    return pages


def test_a_journal_keeps_its_head_and_its_tail_and_reports_the_gap(tmp_path: Path) -> None:
    data = _numbered(3 * MIB)
    journal = Journal(tmp_path, "ex_long", new=True)
    for i in range(0, len(data), 60 * KIB):  # chunks that straddle the head's end
        journal.append(data[i : i + 60 * KIB])
    assert (journal.start, journal.end) == (len(data) - TAIL, len(data))
    assert journal.window.head == HEAD and journal.retained == HEAD + TAIL
    pages = _read_all(journal)
    gaps = [(start, gap) for start, gap, _ in pages if gap]
    assert gaps == [(len(data) - TAIL, len(data) - TAIL - HEAD)]  # one gap, never hidden
    head = b"".join(chunk for start, _, chunk in pages if start < HEAD)
    tail = b"".join(chunk for start, _, chunk in pages if start >= HEAD)
    assert head == data[:HEAD] and tail == data[-TAIL:]
    journal.close()
    # Found again by its figures without listing the directory, and by listing it.
    with listings() as listed:
        again = Journal(tmp_path, "ex_long", figures=(journal.start, journal.end))
        assert b"".join(c for _, _, c in _read_all(again)) == data[:HEAD] + data[-TAIL:]
    assert listed == []
    scanned = Journal(tmp_path, "ex_long")
    assert (scanned.start, scanned.end, scanned.window.head) == (len(data) - TAIL, len(data), HEAD)
    # A head segment, and at most two of the tail's size: nothing else is on disk.
    assert scan_segments(tmp_path, "ex_long")[0].base == 0
    assert sum(s.size for s in scan_segments(tmp_path, "ex_long")) <= HEAD + 2 * TAIL
    assert retained_bytes((journal.start, journal.end)) == HEAD + TAIL
    delete_segments(tmp_path, {"ex_long": (journal.start, journal.end)})
    assert scan_segments(tmp_path, "ex_long") == []


def test_nothing_is_dropped_while_head_and_tail_hold_it_all(tmp_path: Path) -> None:
    data = _numbered(HEAD + TAIL - 100)
    journal = Journal(tmp_path, "ex_mid", new=True)
    journal.append(data)
    assert (journal.start, journal.end, journal.window.head) == (0, len(data), 0)
    assert [gap for _, gap, _ in _read_all(journal)] == [0] * len(_read_all(journal))
    assert journal.read(0, len(data)) == data  # across the head's segment: no gap there


PRINT_LINES = ("python3 -c \"import sys; n = int(sys.argv[1]); "
               "[sys.stdout.write('line %08d\\n' % i) for i in range(n)]\" {n}")


async def _read_pages(handle: Any, scope: dict[str, Any], eid: str) -> list[dict[str, Any]]:
    """Execution.read from no cursor to the end, every page."""
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await handle.call(EXEC_READ, {**scope, "execution_id": eid, "page_bytes": 65536,
                                               **({"cursor": cursor} if cursor else {})},
                                 timeout_s=20)
        pages.append(page.wire())
        if not page.has_more:
            return pages
        cursor = page.next_cursor


async def _run(handle: Any, scope: dict[str, Any], lines: int) -> str:
    started = await handle.call(EXEC_START, {
        **scope, "command": PRINT_LINES.format(n=lines), "background": True,
        "idempotency_key": f"print{lines}", "wait_ms": 0}, timeout_s=20)
    eid = started.execution.execution_id
    for _ in range(60):
        done = await handle.call(EXEC_STATUS, {**scope, "execution_id": eid, "wait_ms": 5000},
                                 timeout_s=20)
        if done.execution.status != "running":
            break
    assert done.execution.status == "exited" and done.execution.exit_code == 0
    return str(eid)


def _check(pages: list[dict[str, Any]], lines: int, head: int, tail: int) -> None:
    """The pages hold the first ``head`` bytes, then one gap, then the last ``tail``."""
    total = lines * len("line 00000000\r\n")
    expected = "".join(f"line {i:08d}\n" for i in range(lines))
    assert pages[0]["start"] == 0 and not pages[0].get("gap")
    gapped = [page for page in pages if page.get("gap")]
    assert len(gapped) == 1, [(p["start"], p.get("gap")) for p in pages]
    assert gapped[0]["start"] == total - tail and gapped[0]["gap"] == total - tail - head
    before = "".join(p["text"] for p in pages[: pages.index(gapped[0])])
    after = "".join(p["text"] for p in pages[pages.index(gapped[0]):])
    assert pages[-1]["end"] == total
    # Rendered text: CR LF is LF, so each line is a byte shorter than on the terminal.
    assert max(p["end"] for p in pages if p["start"] < head) == head
    assert expected.startswith(before) and len(before) == head - before.count("\n")
    assert expected.endswith(after) and len(after) + after.count("\n") >= tail - 1


async def test_execution_read_gives_the_first_64_kib_then_the_gap_then_the_last_mib(
    tether_env: Config, workspace: Path
) -> None:
    lines = 3 * MIB // len("line 00000000\r\n") + 1  # just over 3 MiB on the terminal
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        eid = await _run(handle, scope, lines)
        _check(await _read_pages(handle, scope, eid), lines, HEAD, TAIL)
        record = (await handle.call(EXEC_GET, {**scope, "execution_id": eid},
                                    timeout_s=10)).execution
        total = lines * len("line 00000000\r\n")
        assert (record.output_start, record.output_end) == (total - TAIL, total)


@pytest.fixture
def small_sizes(tether_env: Config, monkeypatch: pytest.MonkeyPatch) -> Iterator[Config]:
    monkeypatch.setenv("TETHER_OUTPUT_HEAD_BYTES", "4096")
    monkeypatch.setenv("TETHER_OUTPUT_TAIL_BYTES", "65536")
    yield Config.from_env()


async def test_both_sizes_are_configured(small_sizes: Config, workspace: Path) -> None:
    assert (small_sizes.output_head_bytes, small_sizes.output_tail_bytes) == (4096, 65536)
    async with guardian_thread(small_sizes, workspace) as (handle, scope):
        eid = await _run(handle, scope, 20_000)
        _check(await _read_pages(handle, scope, eid), 20_000, 4096, 65536)


def test_sizes_out_of_range_are_refused_by_name() -> None:
    assert Config.from_env({}).output_head_bytes == HEAD
    assert Config.from_env({"TETHER_OUTPUT_HEAD_BYTES": "0"}).output_head_bytes == 0
    for name, bad in (("TETHER_OUTPUT_HEAD_BYTES", "-1"), ("TETHER_OUTPUT_TAIL_BYTES", "100"),
                      ("TETHER_OUTPUT_TAIL_BYTES", "1MiB")):
        with pytest.raises(ValueError, match=name):
            Config.from_env({name: bad})


def test_no_head_is_the_last_bytes_alone(tmp_path: Path) -> None:
    sizes = OutputSizes(head=0, tail=64 * KIB)
    journal = Journal(tmp_path, "ex_nohead", sizes.tail, head=sizes.head, new=True)
    data = _numbered(300 * KIB)
    journal.append(data)
    assert (journal.start, journal.window.head) == (len(data) - 64 * KIB, 0)
    assert journal.resume(0) == (len(data) - 64 * KIB, len(data) - 64 * KIB)
    assert journal.read(0, len(data)) == data[-64 * KIB:]
