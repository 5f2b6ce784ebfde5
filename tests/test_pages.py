"""Where output pages end (guardian/history/pages.py): pure cases, a property over any page
size, and paging real output through ``tether serve`` over stdio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from tests.conftest import stdio_params
from tests.mcp_helpers import initialize, read_pages, run
from tether.guardian.history.pages import MAX_HELD_SEQUENCE, held_tail, utf8_safe_end
from tether.guardian.terminal.render import render_output
from tether.shared.config import Config

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


# -- through tether serve --------------------------------------------------------------------

@pytest.fixture
async def stdio(tether_env: Config) -> AsyncIterator[Client]:
    """The real ``tether serve`` over stdio, driven by the MCP SDK client."""
    async with Client(stdio_params()) as client:
        yield client


@pytest.mark.anyio
@pytest.mark.parametrize("page_bytes", [16 * 1024, 1000])
async def test_hyperlinks_with_long_urls_page_cleanly(
    stdio: Client, workspace: Path, page_bytes: int,
) -> None:
    """OSC 8 hyperlinks (ls --hyperlink, gcc, cargo) with 120-byte URLs: no page ends inside
    one, so no URL leaks into the text (a 64-byte look-back found no ESC inside them)."""
    session = await initialize(stdio, workspace)
    out = await run(stdio, session, "for i in $(seq 1 400); do printf '\\033]8;;%s\\033\\\\"
                    "link%03d\\033]8;;\\033\\\\\\n' " + URL + " $i; done", wait=30)
    assert out["status"] == "exited"
    pages = await read_pages(stdio, session, out["execution_id"], page_bytes)
    assert "".join(p["text"] for p in pages) == "".join(f"link{i:03d}\n" for i in range(1, 401))


@pytest.mark.anyio
@pytest.mark.parametrize("page_bytes", [1000, 64])
async def test_charset_designations_page_cleanly(
    stdio: Client, workspace: Path, page_bytes: int,
) -> None:
    """``tput sgr0`` prints ESC ( B ESC [ m: a page that ended between ESC ( and B showed the
    B as text on the next page (ESC with an intermediate byte is complete at its final byte)."""
    session = await initialize(stdio, workspace)
    out = await run(stdio, session,
                    "for i in $(seq 1 200); do printf 'item%03d ok\\033(B\\033[m\\n' $i; done",
                    wait=30)
    assert out["status"] == "exited"
    pages = await read_pages(stdio, session, out["execution_id"], page_bytes)
    assert "".join(p["text"] for p in pages) == "".join(f"item{i:03d} ok\n" for i in range(1, 201))
