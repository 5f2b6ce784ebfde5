"""Where output pages end (guardian/history/pages.py): pure cases, a property over any page
size, and paging real output through ``tether serve`` over stdio."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from tests.mcp_helpers import bash, execution, initialize, read_pages, run
from tether.guardian.history.pages import (
    MAX_HELD_SEQUENCE,
    held_tail,
    render_page,
    utf8_safe_end,
)
from tether.guardian.terminal.render import render_output
from tether.protocol.limits import MAX_PAGE_TEXT_RATIO

URL = "https://example.com/" + "p" * 100


@pytest.mark.parametrize(
    ("data", "held"),
    [
        (b"plain", 0),
        (b"A\xe2", 1),
        (b"A\xe2\x82", 2),
        (b"A\xe2\x82\xac", 0),
        (b"A\xf0\x9f\x98", 3),
        (b"A\x82\x82", 0),  # continuation bytes with no lead: garbage already
        (b"A\xff", 0),
        (b"x\x1b", 1),
        (b"x\x1b[", 2),
        (b"x\x1b[3", 3),
        (b"x\x1b[?25", 5),
        (b"x\x1b[31m", 0),
        (b"x\x1b[31mred", 0),
        (b"x\x1b[12\n", 0),  # a CSI a control ended: the renderer dropped it already
        (b"x\x1b(", 2),
        (b"x\x1b(B", 0),
        (b"x\x1b(B\x1b[m", 0),
        (b"x\x1b#", 2),
        (b"x\x1b#8", 0),
        (b"x\x1b7", 0),
        (b"x\x1b]0;ti", 6),
        (b"x\x1b]0;title\x07", 0),
        (b"x\x1b]8;;" + URL.encode(), 5 + len(URL)),
        (b"x\x1b]8;;" + URL.encode() + b"\x1b", 1),
        (b"x\x1b]8;;" + URL.encode() + b"\x1b\\link", 0),
        (b"x\x1bP+q54", 6),
        (b"x\x1b]0;caf\xc3", 8),  # an open title ending in half a character
        (b"\x1b[3", 3),  # all of it: the caller decides whether a page may be empty
    ],
)
def test_held_tail(data: bytes, held: int) -> None:
    assert held_tail(data) == held


def test_a_sequence_longer_than_the_bound_is_released() -> None:
    """An open sequence is looked for only MAX_HELD_SEQUENCE bytes back: past that, its
    bytes are released, so a reader is never stalled behind one that never ends."""
    within = b"x\x1b]52;c;" + b"A" * (MAX_HELD_SEQUENCE - 8)
    beyond = b"x\x1b]52;c;" + b"A" * MAX_HELD_SEQUENCE
    assert held_tail(within) == len(within) - 1
    assert held_tail(beyond) == 0


def test_a_page_with_bytes_after_it_is_never_empty() -> None:
    assert utf8_safe_end(b"\x1b]0;title") == len(b"\x1b]0;title")
    assert utf8_safe_end(b"ok\x1b]0;title") == 2


def test_a_page_whose_text_would_outgrow_its_bound_stops_after_a_line() -> None:
    raw = b"\x1b[500Gx\r\n" * 100
    line = " " * 499 + "x\n"
    taken, text = render_page(raw, 2000)
    assert (taken, text) == (3 * 9, line * 3)
    assert render_page(raw, 10**6) == (len(raw), line * 100)


def test_a_line_alone_over_the_bound_is_cut_inside_it() -> None:
    raw = b"ab\x1b[300Gcd\x1b[500Gef\n"
    taken, text = render_page(raw, 400)
    assert raw[:taken].startswith(b"ab\x1b[300Gcd") and text == "ab" + " " * 297 + "cd"
    taken, text = render_page(b"\x1b[500Gx", 32)  # pages of 4 bytes have a 32-byte bound
    assert taken > 0 and len(text.encode()) <= 32


def test_a_page_that_fits_is_rendered_whole() -> None:
    raw = "é".encode() * 1000 + b"\xff" * 1000
    assert render_page(raw, 8 * len(raw)) == (len(raw), render_output(raw))


_TOKENS = st.sampled_from([
    "plain words ", "café ", "€", "✓", "中文", "😀", "\n", "\x1b[31m", "\x1b[1;4;38;5;208m",
    "\x1b[0m", "\x1b[m", "\x1b(B", "\x1b)0", "\x1b7", "\x1b8", "\x1b#8", "\x1b]0;a title\x07",
    f"\x1b]8;;{URL}\x1b\\", "\x1b]8;;\x1b\\", "\x1bP+q544e\x1b\\", "\x1b[?25l", "\x1b[?2004h",
])


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(_TOKENS, max_size=80), page=st.integers(min_value=len(URL) + 12,
                                                               max_value=700))
def test_pages_of_any_size_render_as_one_read(tokens: list[str], page: int) -> None:
    """Cut where utf8_safe_end says, pages of output render to the text the whole output
    renders to (no U+FFFD, no half sequence shown as text), whatever the page size."""
    data = "".join(tokens).encode()
    texts, offset = [], 0
    while offset < len(data):
        raw = data[offset : offset + page]
        if offset + len(raw) < len(data):
            raw = raw[: utf8_safe_end(raw)]
        texts.append(render_output(raw))
        offset += len(raw)
    assert "".join(texts) == render_output(data)


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(_TOKENS, max_size=80), cuts=st.lists(st.integers(min_value=0),
                                                             max_size=20))
def test_following_a_stream_as_it_is_written_renders_as_one_read(
    tokens: list[str], cuts: list[int],
) -> None:
    """A reader at the live end after each write (written in arbitrary chunks, as pipes and
    ssh deliver them) holds back the open tail; after the end it takes the rest. Its pages
    render to the text of one read after the end."""
    data = "".join(tokens).encode()
    ends = [*sorted({cut % (len(data) + 1) for cut in cuts}), len(data)]
    texts, offset = [], 0
    for written in ends:
        raw = data[offset:written]
        raw = raw[: len(raw) - held_tail(raw)]
        texts.append(render_output(raw))
        offset += len(raw)
    texts.append(render_output(data[offset:]))  # the end: whatever is left
    assert "".join(texts) == render_output(data)


# -- through tether serve --------------------------------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("page_bytes", [16 * 1024, 1000])
async def test_hyperlinks_with_long_urls_page_cleanly(
    stdio_client: Client, workspace: Path, page_bytes: int,
) -> None:
    """OSC 8 hyperlinks (ls --hyperlink, gcc, cargo) with 120-byte URLs: no page ends inside
    one, so no URL leaks into the text (a 64-byte look-back found no ESC inside them)."""
    session = await initialize(stdio_client, workspace)
    out = await run(stdio_client, session, "for i in $(seq 1 400); do printf '\\033]8;;%s\\033\\\\"
                    "link%03d\\033]8;;\\033\\\\\\n' " + URL + " $i; done", wait=30)
    assert out["status"] == "exited"
    pages = await read_pages(stdio_client, session, out["execution_id"], page_bytes)
    assert "".join(p["text"] for p in pages) == "".join(f"link{i:03d}\n" for i in range(1, 401))


@pytest.mark.anyio
@pytest.mark.parametrize("page_bytes", [1000, 64])
async def test_charset_designations_page_cleanly(
    stdio_client: Client, workspace: Path, page_bytes: int,
) -> None:
    """``tput sgr0`` prints ESC ( B ESC [ m: a page that ended between ESC ( and B showed the
    B as text on the next page (ESC with an intermediate byte is complete at its final byte)."""
    session = await initialize(stdio_client, workspace)
    out = await run(stdio_client, session,
                    "for i in $(seq 1 200); do printf 'item%03d ok\\033(B\\033[m\\n' $i; done",
                    wait=30)
    assert out["status"] == "exited"
    pages = await read_pages(stdio_client, session, out["execution_id"], page_bytes)
    assert "".join(p["text"] for p in pages) == "".join(f"item{i:03d} ok\n" for i in range(1, 201))



# A program that writes its output in stages, each cut inside a character or a sequence, and
# waits for a gate file before the next: a reader meets every cut at the live end.
_STAGES = [b"A\xe2", b"\x82\xacB\n", b"x\x1b[3", b"1mred\x1b[0m\n", b"y\x1b]0;",
           b"mytitle\x07z\n", b"long\x1b]52;c;" + b"Q" * 5000, b"\x07done\n", b"end\x1b]0;never"]
_STAGED = f"""
import os, sys, time
for i, stage in enumerate({_STAGES!r}):
    while i and not os.path.exists(os.path.join(sys.argv[1], str(i))):
        time.sleep(0.01)
    sys.stdout.buffer.write(stage)
    sys.stdout.buffer.flush()
"""
#: What a read at the live end shows after each stage, and how many bytes it holds back.
_LIVE_PAGES = [("A", 1), ("€B\n", 0), ("x", 3), ("red\n", 0), ("y", 4), ("z\n", 0),
               ("long", 0), ("done\n", 0), ("end", len(b"\x1b]0;never"))]


@pytest.mark.anyio
async def test_reading_at_the_live_end_never_splits_a_character_or_a_sequence(
    stdio_client: Client, workspace: Path, tmp_path: Path,
) -> None:
    """A running command's output read as it comes: a page at the live end stops before a
    half-written character or escape sequence and leaves the cursor there (it used to render
    'A\\ufffd', then '\\ufffd\\ufffdB', and show '1mred' and 'mytitle' as text). A sequence
    longer than MAX_HELD_SEQUENCE is released at once, and what is still held when the
    program exits is rendered after the end: the reader is never stalled."""
    (tmp_path / "staged.py").write_text(_STAGED)
    session = await initialize(stdio_client, workspace)
    started = await bash(stdio_client, session, {
        "type": "command", "is_background": True,
        "command": f"python3 {tmp_path / 'staged.py'} {tmp_path}"}, wait=0)
    execution_id = started["execution_id"]
    cursor, texts, written = None, [], 0
    for stage, (text, held) in enumerate(_LIVE_PAGES):
        if stage:
            (tmp_path / str(stage)).touch()
        written += len(_STAGES[stage].replace(b"\n", b"\r\n"))  # the terminal writes CR LF

        def reached(r: dict[str, Any], n: int = written) -> bool:
            return bool(r["output_end"] >= n)

        await _until(stdio_client, session, execution_id, "its output", reached)
        page = await _read(stdio_client, session, execution_id, cursor)
        texts.append(page["text"])
        cursor = page["next_cursor"]
        if stage < len(_LIVE_PAGES) - 1:  # it may exit any time after its last stage
            assert (page["text"], page["end"], page["has_more"]) == (text, written - held, False)
            again = await _read(stdio_client, session, execution_id, cursor)
            assert (again["text"], again["start"], again["end"]) == ("", page["end"], page["end"])
    ended = await _until(stdio_client, session, execution_id, "its exit",
                         lambda r: r["status"] == "exited")
    last = await _read(stdio_client, session, execution_id, cursor)
    texts.append(last["text"])
    assert (last["end"], last["has_more"]) == (ended["output_end"], False)
    assert "".join(texts) == "A€B\nxred\nyz\nlongdone\nend"
    whole = await read_pages(stdio_client, session, execution_id)
    assert "".join(p["text"] for p in whole) == "".join(texts)


async def _until(client: Client, session: dict[str, Any], execution_id: str, what: str,
                 done: Callable[[dict[str, Any]], bool], timeout: float = 15.0) -> dict[str, Any]:
    """Poll ``Execution.get`` until ``done(record)``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        record: dict[str, Any] = (await execution(client, session, {
            "type": "get", "execution_id": execution_id}))["data"]["execution"]
        if done(record):
            return record
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {record}"
        await anyio.sleep(0.02)


async def _read(client: Client, session: dict[str, Any], execution_id: str,
                cursor: str | None) -> dict[str, Any]:
    action: dict[str, Any] = {"type": "read", "execution_id": execution_id}
    if cursor is not None:
        action["cursor"] = cursor
    page: dict[str, Any] = (await execution(client, session, action))["data"]
    return page


@pytest.mark.anyio
async def test_a_page_that_renders_large_is_cut_short_not_refused(
    stdio_client: Client, workspace: Path,
) -> None:
    """Column jumps (ESC[500G pads its line to column 500) made a legal 64 KiB page render to
    3.6 MB, which the front-end's decoder refused (limit_exceeded, 'undecodable frame'), and
    observe failed as a whole. A page now stops after the last line whose text fits
    MAX_PAGE_TEXT_RATIO times its size, with has_more and a cursor where it stopped."""
    session = await initialize(stdio_client, workspace)
    out = await run(stdio_client, session, "for i in $(seq 1 9000); do printf '\\033[500Gx\\n'; done",
                    wait=30)
    assert out["status"] == "exited"
    pages = await read_pages(stdio_client, session, out["execution_id"], 65536)
    assert len(pages) > 2
    assert all(len(p["text"].encode()) <= 65536 * MAX_PAGE_TEXT_RATIO for p in pages)
    assert "".join(p["text"] for p in pages) == (" " * 499 + "x\n") * 9000
    items = [{"execution_id": out["execution_id"], "page_bytes": 32768},
             {"execution_id": out["execution_id"], "source": "screen", "page_bytes": 32768}]
    observed = await execution(stdio_client, session, {"type": "observe", "items": items})
    output, screen = observed["data"]["items"]
    assert (output["status"], screen["status"]) == ("ok", "ok")
    assert output["page"]["has_more"] and output["page"]["text"].startswith(" " * 499 + "x\n")
    assert len(output["page"]["text"].encode()) <= 32768 * MAX_PAGE_TEXT_RATIO
