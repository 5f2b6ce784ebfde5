"""Unit tests for guardian.screen: the hardened, lazily emulated terminal screen."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import AGENT_SCREEN_STATES, fixture_file
from tether.guardian.terminal.parser import VTParser
from tether.guardian.terminal.screen import ScreenSnapshot, TerminalScreen, snapshot_of
from tether.guardian.terminal.vt import HardenedScreen

FIXTURE_NAMES = sorted(AGENT_SCREEN_STATES)


def screen_after(*chunks: bytes, cols: int = 40, rows: int = 10) -> ScreenSnapshot:
    screen = TerminalScreen(cols, rows)
    for chunk in chunks:
        screen.feed(chunk)
    return screen.snapshot()


# -- real agent screens -------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("chunking", ["whole", "random"])
def test_fixture_replay_gives_the_captured_screen(name: str, chunking: str) -> None:
    data = fixture_file(f"agent-screens/{name}.ansi").read_bytes()
    expected = fixture_file(f"agent-screens/{name}.txt").read_text(encoding="utf-8").rstrip("\n")
    screen = TerminalScreen(120, 40)
    if chunking == "whole":
        screen.feed(data)
    else:
        for chunk in _random_chunks(data, seed=len(name), largest=64):
            screen.feed(chunk)
    snap = screen.snapshot()
    assert snap.text == expected
    assert (snap.rows, snap.cols, len(snap.lines)) == (40, 120, 40)
    assert snap.alternate  # Claude Code draws on the alternate screen
    assert snap.title.endswith("Claude Code")


# -- hardening ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [47, 1047, 1049])
def test_alternate_screen_restores_the_normal_screen(mode: int) -> None:
    screen = TerminalScreen(30, 6)
    screen.feed(b"$ vim notes.txt\r\nline two")
    before = screen.snapshot()
    screen.feed(b"\x1b[?%dh" % mode)
    entered = screen.snapshot()
    assert entered.alternate
    assert entered.text == ""
    screen.feed(b"\x1b[H~ editor content\x1b[3;1H~ more\x1b[2J\x1b[Hfinal")
    assert screen.snapshot().lines[0] == "final"
    screen.feed(b"\x1b[?%dl" % mode)
    after = screen.snapshot()
    assert not after.alternate
    assert after.lines == before.lines
    if mode == 1049:  # 1049 also saves and restores the cursor
        assert (after.cursor_row, after.cursor_col) == (before.cursor_row, before.cursor_col)


def test_variation_selector_and_joiner_do_not_drop_text() -> None:
    snap = screen_after("ok ❤️ done\r\nfamily 👨‍👩‍👧 here\r\ncafe\u0301!".encode())
    assert snap.lines[0] == "ok ❤️ done"
    assert snap.lines[1] == "family 👨‍👩‍👧 here"
    assert snap.lines[2] == "café!"


def test_wide_characters_take_two_cells_and_wrap_whole() -> None:
    snap = screen_after("中文x".encode())
    assert (snap.lines[0], snap.cursor_col) == ("中文x", 5)
    snap = screen_after(b"abcd" + "中".encode(), cols=5)
    assert snap.lines[:2] == ("abcd", "中")  # no half character at the edge
    snap = screen_after("中文".encode() + b"\x1b[1;2HX", cols=10)
    assert snap.lines[0] == " X文"  # overwriting half of a wide character blanks it


@pytest.mark.parametrize(
    "sequence",
    [b"\x1b[<1u", b"\x1b[=1u", b"\x1b[>1u", b"\x1b[?u", b"\x1b[=5;1u", b"\x1b[<u", b"\x1b[>4;2m",
     b"\x1b[!p", b"\x1b[2 q", b"\x1b[?2026$p", b"\x1bP+q544e\x1b\\", b"\x1b_Ga=q\x1b\\",
     b"\x1b[38:2::255:0:0m", b"\x1b[4:3m"],
)
def test_unhandled_sequences_print_nothing(sequence: bytes) -> None:
    snap = screen_after(b"a" + sequence + b"b")
    assert snap.lines[0] == "ab"


def test_keyboard_protocol_sequences_leave_no_1u() -> None:
    snap = screen_after(b"\x1b[<1u\x1b[=1u\x1b[>1u")
    assert "1u" not in snap.text
    assert snap.text == ""


def test_title_comes_from_osc_0_and_2() -> None:
    screen = TerminalScreen(20, 3)
    assert screen.snapshot().title == ""
    screen.feed(b"\x1b]0;first\x07")
    assert screen.snapshot().title == "first"
    screen.feed(b"\x1b]2;sec")
    screen.feed(b"ond \xe2\x9c")
    screen.feed(b"\xb3\x1b\\text")
    snap = screen.snapshot()
    assert snap.title == "second ✳"
    assert snap.lines[0] == "text"
    screen.feed(b"\x1b]1;icon only\x07\x1b]8;;https://x\x07")
    assert screen.snapshot().title == "second ✳"


def test_resize_keeps_content_and_clamps_the_cursor() -> None:
    screen = TerminalScreen(20, 5)
    screen.feed(b"one\r\ntwo\r\nthree\r\nfour")
    screen.resize(10, 3)
    snap = screen.snapshot()
    assert (snap.cols, snap.rows, len(snap.lines)) == (10, 3, 3)
    assert snap.lines == ("two", "three", "four")  # rows left at the top, cursor row kept
    screen.resize(30, 6)
    screen.feed(b"\r\n" + b"x" * 25)
    snap = screen.snapshot()
    assert snap.lines[3] == "x" * 25
    with pytest.raises(ValueError, match="at least 1x1"):
        screen.resize(0, 5)


def test_bytes_fed_counts_everything() -> None:
    screen = TerminalScreen()
    for chunk in (b"abc", b"", b"\x1b[6n", b"x" * 1000):
        screen.feed(chunk)
    assert screen.bytes_fed == 1007


@pytest.mark.parametrize(
    ("raw", "top_rows"),
    [
        (b"abcdef\x1b[1;3H\x1b[4hXY\x1b[4lZ", ("abXYZdef",)),  # insert mode, then replace
        (b"abcdef\x1b[1;3H\x1b[2@", ("ab  cdef",)),  # ICH
        (b"abcdef\x1b[1;2H\x1b[2P", ("adef",)),  # DCH
        (b"abcdef\x1b[1;2H\x1b[3X", ("a   ef",)),  # ECH
        (b"-\x1b[4b=\x1b[b\r\n\x1b[3b", ("-----==", "")),  # REP, only right after text
        (b"1\r\n2\r\n3\x1b[1S", ("2", "3", "")),  # SU
        (b"1\r\n2\r\n3\x1b[1T", ("", "1", "2")),  # SD
        (b"\x1b(0lqk\x1b(B lqk", ("┌─┐ lqk",)),  # DEC line drawing
        (b"a\tb\x1b[2Ic", ("a       b               c",)),  # HT, CHT
        (b"x" * 40 + b"\nA", ("x" * 40, " " * 39 + "A")),  # LF ends the pending wrap
        (b"x" * 40 + b"A", ("x" * 40, "A")),  # autowrap
        (b"\x1b[?7l" + b"x" * 45 + b"A", ("x" * 39 + "A", "")),  # no autowrap
        (b"\x1b[2;4r\x1b[4;1Ha\nb\nc", ("", "a", " b", "  c")),  # scrolling in a region
    ],
)
def test_editing_and_scrolling(raw: bytes, top_rows: tuple[str, ...]) -> None:
    assert screen_after(raw).lines[: len(top_rows)] == top_rows
    for split in range(1, len(raw)):  # the parser gives the same screen for any split
        parser = VTParser(HardenedScreen(40, 10))
        parser.feed(raw[:split])
        parser.feed(raw[split:])
        assert snapshot_of(parser.screen).lines[: len(top_rows)] == top_rows


def test_public_modes_do_not_alias_private_ones() -> None:
    # pyte stores ?3 (132 columns) as 96 and ?5 (reverse screen) as 160.
    screen = TerminalScreen(40, 5)
    screen.feed(b"\x1b[96h\x1b[160h\x1b[?3hkept")
    snap = screen.snapshot()
    assert (snap.cols, snap.lines[0]) == (40, "kept")


def test_saved_cursor_survives_a_second_restore() -> None:
    snap = screen_after(b"\x1b[3;5H\x1b7\x1b[1;1H\x1b8A\x1b[1;1H\x1b8B")
    assert snap.lines[2] == "    B"


def test_cursor_below_the_scroll_region_does_not_scroll() -> None:
    snap = screen_after(b"top\x1b[1;3r\x1b[5;1Hlow\n\n\n\n\n\n\rend", rows=6)
    assert snap.lines[0] == "top"
    assert snap.lines[5] == "end"


# -- replies to terminal queries ---------------------------------------------------------


def test_cursor_position_report_is_sent_from_feed() -> None:
    replies: list[bytes] = []
    screen = TerminalScreen(40, 10, respond=replies.append)
    screen.feed(b"line one\r\nab\x1b[6ncd")
    assert replies == [b"\x1b[2;3R"]  # answered before any snapshot, at the query's moment
    assert screen.snapshot().lines[1] == "abcd"


@pytest.mark.parametrize("split", range(1, 8))
def test_cursor_position_report_split_across_feeds(split: int) -> None:
    data = b"xyz\x1b[6n!!"
    replies: list[bytes] = []
    screen = TerminalScreen(40, 10, respond=replies.append)
    for chunk in (b"hello\r\n", data[:split], data[split:]):
        screen.feed(chunk)
    assert replies == [b"\x1b[2;4R"]
    assert screen.snapshot().lines[1] == "xyz!!"


def test_split_query_byte_by_byte_is_answered_on_its_last_byte() -> None:
    replies: list[bytes] = []
    screen = TerminalScreen(40, 10, respond=replies.append)
    screen.feed(b"\x1b[3;7H")
    for byte in b"\x1b[6n":
        assert replies == []
        screen.feed(bytes([byte]))
    assert replies == [b"\x1b[3;7R"]


@pytest.mark.parametrize(
    ("query", "reply"),
    [(b"\x1b[c", b"\x1b[?62;22c"), (b"\x1b[0c", b"\x1b[?62;22c"), (b"\x1b[>c", b"\x1b[>1;10;0c"),
     (b"\x1b[>0c", b"\x1b[>1;10;0c"), (b"\x1b[5n", b"\x1b[0n")],
)
def test_device_attributes_and_status_replies(query: bytes, reply: bytes) -> None:
    replies: list[bytes] = []
    TerminalScreen(respond=replies.append).feed(b"a" + query + b"b")
    assert replies == [reply]


def test_query_before_a_reset_in_the_same_chunk_sees_the_old_cursor() -> None:
    replies: list[bytes] = []
    screen = TerminalScreen(40, 10, respond=replies.append)
    screen.feed(b"".join(b"%d\r\n" % i for i in range(5000)))
    screen.feed(b"\x1b[5;7H\x1b[6n\x1bc\x1b[H\x1b[2J\x1b[6n")
    assert replies == [b"\x1b[5;7R", b"\x1b[1;1R"]


# -- laziness ------------------------------------------------------------------------------


class SmallLazyScreen(TerminalScreen):
    """Skips and compacts at small sizes, so short tests exercise every skip rule."""

    compact_at = 50_000
    skip_block = 512
    job_bytes = 20_000


def test_query_after_skipped_output_reports_the_right_cursor() -> None:
    replies: list[bytes] = []
    screen = SmallLazyScreen(30, 8, respond=replies.append)
    for i in range(3000):
        screen.feed(b"line %d\r\n" % i)
    screen.feed(b"\x1b[31mabc\x1b[6n")
    assert replies == [b"\x1b[8;4R"]
    assert screen.snapshot().lines[-2:] == ("line 2999", "abc")


def test_pending_output_stays_bounded() -> None:
    screen = SmallLazyScreen(80, 24)
    line = b"some log output that keeps coming\r\n"
    for _ in range(20_000):
        screen.feed(line)
        assert len(screen._pending) <= SmallLazyScreen.compact_at
    snap = screen.snapshot()
    assert snap.lines[-2] == line.decode().strip()
    assert snap.lines[-1] == ""


def _reference_snapshot(parser: VTParser) -> ScreenSnapshot:
    return snapshot_of(parser.screen)


def _hidden_state(screen: HardenedScreen) -> tuple[object, ...]:
    """What a snapshot does not show but later output depends on: it must match too."""
    saved = [
        slot and (slot.cursor.x, slot.cursor.y, slot.cursor.attrs, slot.origin, slot.wrap)
        for slot in (screen._saved, screen._normal_saved)
    ]
    normal = screen._normal_buffer or {}
    return (
        sorted(screen.mode), screen.margins, screen.cursor.attrs, screen.cursor.hidden,
        screen.charset, screen.g0_charset[:128], screen.g1_charset[:128], screen.icon_name,
        sorted(screen.tabstops), saved,
        [(y, "".join(row[x].data for x in range(screen.columns))) for y, row in sorted(normal.items())],
    )


def _assert_same(lazy: TerminalScreen, reference: VTParser) -> None:
    assert lazy.snapshot() == _reference_snapshot(reference)
    assert _hidden_state(lazy._screen) == _hidden_state(reference.screen)


def test_lazy_screen_equals_full_emulation() -> None:
    """The skip rules never change what the screen shows, nor the replies to queries."""
    data = _corpus(seed=7, size=1_500_000)
    reference_replies: list[bytes] = []
    reference = VTParser(HardenedScreen(120, 40, reference_replies.append))
    lazy_replies: dict[type[TerminalScreen], list[bytes]] = {TerminalScreen: [], SmallLazyScreen: []}
    lazies = [kind(120, 40, replies.append) for kind, replies in lazy_replies.items()]
    checkpoints = random.Random(8)
    compared = 0
    for chunk in _random_chunks(data, seed=9, largest=200_000):
        reference.feed(chunk)
        for lazy in lazies:
            lazy.feed(chunk)
        if checkpoints.random() < 0.1:
            for lazy in lazies:
                _assert_same(lazy, reference)
            compared += 1
    for lazy in lazies:
        _assert_same(lazy, reference)
    assert list(lazy_replies.values()) == [reference_replies, reference_replies]
    assert compared > 5 and len(reference_replies) > 10


@pytest.mark.parametrize(("cols", "rows", "seed"), [(80, 24, 1), (20, 5, 2), (7, 3, 3)])
def test_lazy_screen_equals_full_emulation_with_line_runs(cols: int, rows: int, seed: int) -> None:
    data = _corpus(seed=seed, size=700_000, runs=True)
    reference = VTParser(HardenedScreen(cols, rows))
    lazy = SmallLazyScreen(cols, rows)
    checkpoints = random.Random(seed)
    for chunk in _random_chunks(data, seed=seed, largest=100_000):
        reference.feed(chunk)
        lazy.feed(chunk)
        if checkpoints.random() < 0.03:
            _assert_same(lazy, reference)
    _assert_same(lazy, reference)


@pytest.mark.parametrize(
    "prefix",
    [b"", b"\x1b[5;1H", b"\x1b[3;8r\x1b[4;1H", b"\x1b[3;8r\x1b[?6h\x1b[2;1H", b"\x1b[4h\x1b[?7l",
     b"\x1b[20h\x1b[1;31m", b"\x1b[2;5r\x1b[9;1H", b"\x1b[?1049h\x1b[7;3H"],
)
@pytest.mark.parametrize("kind", ["plain", "coloured"])
def test_skipping_a_line_run_keeps_the_screen_exact(prefix: bytes, kind: str) -> None:
    """Snapshot right at the end of a long run: stale rows would show at the top."""
    lines = []
    for i in range(400):
        text = b"%d:" % i + b"=" * ((i * 37) % 45)  # lengths jump around: overlays show
        lines.append(b"\x1b[%dm%s\x1b[0m\x1b[K" % (31 + i % 7, text) if kind == "coloured" else text)
    run = b"\r\n".join(lines) + b"\r\n" + b"tail"
    for rows in (10, 12):
        reference = VTParser(HardenedScreen(50, rows))
        lazy = SmallLazyScreen(50, rows)
        for data in (b"old screen content " * 40, prefix, run):
            reference.feed(data)
            lazy.feed(data)
        _assert_same(lazy, reference)


@pytest.mark.parametrize(
    "skipped",
    [
        b"\x1b[1;31mred\x1b[0;" + b"1;" * 40 + b"m",  # a reset SGR too long to count as one
        b"\x1b[?7l\x1b[4h\x1b[20h\x1b[?25l\x1b[?6h",  # modes
        b"\x1b(0\x1b)0\x1b]2;skipped title\x07\x1b]1;icon\x07",  # charsets, title
        b"\x1b[3;9r\x1b[?6h",  # a scroll region in origin mode
        b"\x1b[5;5H\x1b7\x1b[9;9H",  # a saved cursor
        b"\x1b[2;2Hnormal\x1b[?1049h\x1b[4;4Halt",  # a buffer switch
        b"\x1b[3g\x1b[12G\x1bH",  # tab stops set
        b"\x1b[9G\x1b[g",  # a tab stop cleared
        b"\x1b)0\x0eabc",  # a locking shift
        b"\x1b]0;ti\x0etle\x07",  # SO inside a title: not a shift
        b"text\x1bc\x1b[1;32m",  # a reset in the middle
    ],
)
@pytest.mark.parametrize("clear", [b"\x1b[H\x1b[2J", b"\x1b[2J\x1b[3J\x1b[H", b"\x1bc"])
def test_cuts_keep_the_state_they_skip(skipped: bytes, clear: bytes) -> None:
    stream = [b"before\r\n" * 30, skipped + b"more text\r\n" * 3 + clear, b"after\tx\r\ny"]
    reference = VTParser(HardenedScreen(40, 12))
    lazy = TerminalScreen(40, 12)
    for data in stream:
        reference.feed(data)
        lazy.feed(data)
    _assert_same(lazy, reference)


# -- a deterministic corpus of terminal output --------------------------------------------

_WORDS = ["alpha", "délta", "中文字符", "ok ❤️ done", "👍🏽", "👨‍👩‍👧", "e\u0301", "tab\there",
          "back\bspace", "x" * 130, "🎉" * 70, "a\u200db"]
_SGRS = [b"\x1b[0m", b"\x1b[m", b"\x1b[1;31m", b"\x1b[38;5;208m", b"\x1b[48;2;1;2;3m",
         b"\x1b[38:2::10:20:30m", b"\x1b[4:3m", b"\x1b[58;5;3m", b"\x1b[7m", b"\x1b[0;1;4m"]
_TOKENS = [
    # cursor movement and editing
    b"\x1b[%(r)d;%(c)dH", b"\x1b[%(n)dA", b"\x1b[%(n)dB", b"\x1b[%(n)dC", b"\x1b[%(n)dD",
    b"\x1b[%(n)dE", b"\x1b[%(c)dG", b"\x1b[%(r)dd", b"\x1b[%(n)d@", b"\x1b[%(n)dP", b"\x1b[4l",
    b"\x1b[%(n)dX", b"\x1b[%(n)dL", b"\x1b[%(n)dM", b"\x1b[%(n)dS", b"\x1b[%(n)dT", b"\x1b[%(n)dZ",
    b"\x1b[%(n)dI", b"x\x1b[%(n)db", b"\x1b[J", b"\x1b[1J", b"\x1b[K", b"\x1b[1K", b"\x1b[2K",
    b"\r", b"\n", b"\t", b"\b", b"\x1bD", b"\x1bM", b"\x1bE",
    # clears and resets
    b"\x1b[H\x1b[2J", b"\x1b[2J\x1b[3J\x1b[H", b"\x1b[2J", b"\x1b[3J", b"\x1bc", b"\x1b[!p",
    # buffers, modes, regions, saved cursor, tab stops, charsets
    b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?47h", b"\x1b[?47l", b"\x1b[?1047h", b"\x1b[?1047l",
    b"\x1b[?1048h", b"\x1b[?1048l", b"\x1b[?7l", b"\x1b[?7h", b"\x1b[20h",
    b"\x1b[20l", b"\x1b[?6h", b"\x1b[?6l", b"\x1b[?25l", b"\x1b[?25h",
    b"\x1b[%(r)d;%(b)dr", b"\x1b[r", b"\x1b7", b"\x1b8", b"\x1b[s", b"\x1b[u", b"\x1bH", b"\x1b[g",
    b"\x1b[3g", b"\x1b(0", b"\x1b(B", b"\x1b)0", b"\x0e", b"\x0f",
    # titles, strings, keyboard protocol, odd and broken bytes
    b"\x1b]0;title %(n)d\x07", b"\x1b]2;t\xc3\xa9\x1b\\", b"\x1b]0\x07", b"\x1b]0;ti\x0etle\x07",
    b"\x1b]8;;http://x\x07link\x1b]8;;\x07", b"\x1b]133;A\x07", b"\x1b]2;aborted\x1b[1m",
    b"\x1bP+q544e\x1b\\", b"\x1b_Gi=1;AAAA\x1b\\", b"\x1b[<1u", b"\x1b[=1;1u", b"\x1b[>1u",
    b"\x1b[?u", b"\x1b[0;" + b"1;" * 40 + b"m", b"\xe2\x94", b"\xff\xfe", b"\x1b", b"\x00\x7f",
]
_QUERIES = [b"\x1b[6n", b"\x1b[c", b"\x1b[>c", b"\x1b[5n"]
_RARE = [b"\x1b#8", b"\x1b[?5h", b"\x1b[?5l", b"\x1b[4h"]  # slow to emulate: keep them rare


def _line(rng: random.Random) -> bytes:
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 6)))
    return rng.choice(_SGRS) + words.encode() + rng.choice([b"", b"\x1b[K", b"\x1b[0m"])


def _run(rng: random.Random) -> bytes:
    """Many lines: plain, coloured, wide, with erase-in-line; the stuff of build logs."""
    count = rng.randint(50, 1500)
    if rng.random() < 0.5:
        width = rng.choice([3, 50, 200])
        lines = [b"%07d %s" % (i, b"z" * rng.randint(0, width)) for i in range(count)]
    else:
        lines = [_line(rng) for _ in range(count)]
    return b"\r\n".join(lines) + b"\r\n"


def _token(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.003:
        return rng.choice(_QUERIES)
    if roll < 0.004:
        return rng.choice(_RARE)
    if roll < 0.25:
        return _line(rng) + rng.choice([b"", b"\r\n", b" "])
    top = rng.randint(0, 30)
    fields = {b"r": rng.randint(0, 45), b"c": rng.randint(0, 130), b"n": rng.randint(0, 6),
              b"b": top + rng.randint(0, 15)}
    token = rng.choice(_TOKENS)
    return token % fields if b"%(" in token else token


def _corpus(seed: int, size: int, runs: bool = False) -> bytes:
    """About ``size`` bytes of mixed terminal output, the same for the same seed."""
    rng = random.Random(seed)
    parts = [fixture_file(f"agent-screens/{name}.ansi").read_bytes() for name in FIXTURE_NAMES]
    total = sum(map(len, parts))
    while total < size:
        if rng.random() < (0.5 if runs else 0.02):
            part = _run(rng)
        else:
            part = b"".join(_token(rng) for _ in range(rng.randint(1, 40)))
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def _random_chunks(data: bytes, seed: int, largest: int) -> list[bytes]:
    """``data`` cut at random places: single bytes, PTY-sized reads and big ones."""
    rng = random.Random(seed)
    sizes = [size for size in (1, 3, 17, 1000, 4096, 65536, 200_000) if size <= largest]
    chunks = []
    pos = 0
    while pos < len(data):
        size = rng.randint(1, rng.choice(sizes))
        chunks.append(data[pos : pos + size])
        pos += size
    return chunks


# -- any split, any skip ------------------------------------------------------------------


class TinyLazyScreen(TerminalScreen):
    """Every skip rule fires within a few hundred bytes."""

    compact_at = 300
    skip_block = 32
    job_bytes = 100


def _pieces() -> st.SearchStrategy[bytes]:
    fields = {b"r": 3, b"c": 7, b"n": 2, b"b": 5}
    tokens = [token % fields if b"%(" in token else token for token in _TOKENS + _QUERIES]
    lines = st.builds(
        lambda words, end: " ".join(words).encode() + end,
        st.lists(st.sampled_from(_WORDS), max_size=3),
        st.sampled_from([b"\r\n", b"\n", b"", b"\x1b[K\r\n"]),
    )
    run = st.integers(10, 40).map(lambda n: b"".join(b"%d\x1b[1m;\r\n" % i for i in range(n)))
    return st.one_of(st.sampled_from(tokens), lines, run)


@settings(max_examples=150, deadline=None)
@given(st.lists(_pieces(), max_size=50), st.lists(st.integers(1, 60), max_size=30))
def test_any_split_and_any_skip_give_the_same_screen(pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    whole = VTParser(HardenedScreen(12, 5))
    whole.feed(data)
    split = VTParser(HardenedScreen(12, 5))
    lazy = TinyLazyScreen(12, 5)
    pos = 0
    for size in [*cuts, len(data)]:
        split.feed(data[pos : pos + size])
        lazy.feed(data[pos : pos + size])
        pos += size
    assert snapshot_of(split.screen) == snapshot_of(whole.screen)
    assert _hidden_state(split.screen) == _hidden_state(whole.screen)
    _assert_same(lazy, whole)


# -- rendering only the rows that changed ---------------------------------------------------


def _rendered_afresh(screen: HardenedScreen) -> list[str]:
    """Every row rendered from its cells, with no cache: what row_texts must equal."""
    lines = []
    for y in range(screen.lines):
        row: Mapping[int, Any] = screen.buffer.get(y, {})
        cells = [" "] * screen.columns
        for x, char in row.items():
            if x < screen.columns:
                cells[x] = char.data
        lines.append("".join(cells).rstrip())
    return lines


@pytest.mark.parametrize(("cols", "rows", "seed"), [(80, 24, 11), (12, 5, 12), (120, 40, 13)])
def test_cached_rows_match_rows_rendered_afresh(cols: int, rows: int, seed: int) -> None:
    # Rendered after every chunk (so the cache is used between small changes), with resizes
    # now and then: a row the cache kept must be exactly what its cells say.
    rng = random.Random(seed)
    parser = VTParser(HardenedScreen(cols, rows))
    renders = 0
    for chunk in _random_chunks(_corpus(seed, 150_000), seed, 4096):
        parser.feed(chunk)
        if rng.random() < 0.01:
            parser.screen.resize(lines=rng.randint(2, rows + 5), columns=rng.randint(2, cols + 9))
        assert parser.screen.row_texts() == _rendered_afresh(parser.screen)
        renders += 1
    assert renders > 100


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_pieces(), max_size=6), max_size=25))
def test_cached_rows_match_after_any_edits(batches: list[list[bytes]]) -> None:
    parser = VTParser(HardenedScreen(12, 5))
    for batch in batches:
        parser.feed(b"".join(batch))
        assert parser.screen.row_texts() == _rendered_afresh(parser.screen)


def test_a_command_at_the_bottom_renders_only_its_rows() -> None:
    # The shell's case: every command scrolls the screen; the rows that moved are not drawn
    # again (counted through the cache: an unchanged row keeps its text object).
    parser = VTParser(HardenedScreen(40, 10))
    for i in range(30):
        parser.feed(b"$ echo %d\r\n%d\r\n" % (i, i))
    before = parser.screen.row_texts()
    parser.feed(b"$ echo x\r\nx\r\n")
    after = parser.screen.row_texts()
    assert after[:-3] == before[2:-1]  # two rows scrolled away
    assert all(a is b for a, b in zip(after[:-3], before[2:-1], strict=True))
    assert after[-3:] == ["$ echo x", "x", ""]


# -- catching up off the event loop ---------------------------------------------------------


def _frames(count: int, cols: int = 120, rows: int = 40) -> bytes:
    """Full-screen redraws by cursor addressing: no skip rule applies to any byte."""
    return b"".join(
        b"".join(b"\x1b[%d;1H\x1b[3%dm%s\x1b[0m" % (row, row % 8, (b"f%d r%d " % (n, row) * 20)[: cols - 1])
                 for row in range(1, rows + 1))
        for n in range(count)
    )


def test_a_big_catch_up_on_a_loop_is_a_job_in_slices_with_flow_control() -> None:
    data = _frames(120)  # about 700 kB
    reference = VTParser(HardenedScreen(120, 40))
    reference.feed(data)

    async def main() -> tuple[list[bool], int, ScreenSnapshot]:
        flows: list[bool] = []
        screen = TerminalScreen(120, 40, flow=flows.append)
        screen.compact_at = 100_000
        backlog_after_feeding = 0
        for start in range(0, len(data), 64 * 1024):
            screen.feed(data[start : start + 64 * 1024])
            backlog_after_feeding = max(backlog_after_feeding, screen.backlog)
            await asyncio.sleep(0)  # as the PTY reader does: one chunk per loop iteration
        snap = await screen.snapshot_async()
        assert screen.backlog == 0
        return flows, backlog_after_feeding, snap

    flows, backlog, snap = asyncio.run(main())
    assert backlog > TerminalScreen.compact_at // 100  # feed() left the work to the driver
    assert snap == snapshot_of(reference.screen)
    assert flows and flows[0] is False and flows[-1] is True  # paused, then resumed
    assert flows == [flag for pair in zip(flows[::2], flows[1::2], strict=False) for flag in pair]


def test_a_query_behind_a_running_job_is_answered_in_order() -> None:
    replies: list[bytes] = []
    reference_replies: list[bytes] = []
    data = _frames(40) + b"\x1b[7;9H\x1b[6n" + _frames(3) + b"\x1b[2;3H\x1b[6n"
    VTParser(HardenedScreen(120, 40, reference_replies.append)).feed(data)

    async def main() -> None:
        screen = TerminalScreen(120, 40, respond=replies.append)
        screen.compact_at = 50_000
        for start in range(0, len(data), 4096):
            screen.feed(data[start : start + 4096])
        await screen.snapshot_async()

    asyncio.run(main())
    assert replies == reference_replies == [b"\x1b[7;9R", b"\x1b[2;3R"]


def test_after_full_screen_output_the_backlog_stays_small() -> None:
    """Once a job met output that is not plain text, emulation keeps up from busy_at on (and
    pauses the reader there), so a screen request after a flood has little left to draw."""
    data = _frames(120)  # about 700 kB of cursor-addressed frames
    reference = VTParser(HardenedScreen(120, 40))
    reference.feed(data)

    async def main() -> tuple[list[bool], int, int, ScreenSnapshot]:
        flows: list[bool] = []
        screen = TerminalScreen(120, 40, flow=flows.append)
        screen.busy_at = 100_000
        screen.feed(data[:20_000])
        await screen.snapshot_async()  # one job over full-screen output
        backlog = backlog_plain = 0
        for start in range(20_000, len(data), 32 * 1024):
            while flows and flows[-1] is False:  # as the PTY reader does: paused, no reads
                await asyncio.sleep(0)
            screen.feed(data[start : start + 32 * 1024])
            backlog = max(backlog, screen.backlog)
            await asyncio.sleep(0)
        left = screen.backlog
        plain = TerminalScreen(120, 40)  # never met full-screen output: lazy up to compact_at
        for start in range(0, len(data), 32 * 1024):
            plain.feed(data[start : start + 32 * 1024])
            backlog_plain = max(backlog_plain, plain.backlog)
            await asyncio.sleep(0)
        assert backlog_plain == len(data)
        return flows, backlog, left, await screen.snapshot_async()

    flows, backlog, left, snap = asyncio.run(main())
    assert backlog < 100_000 + 2 * 32 * 1024 + TerminalScreen.job_bytes
    assert left < 2 * (100_000 + 32 * 1024)  # the pending bytes and the running job
    assert flows and flows[0] is False and flows[-1] is True
    assert snap == snapshot_of(reference.screen)


def test_a_backlog_is_drawn_once_output_goes_quiet() -> None:
    """A lazy backlog (plain text, under compact_at) is caught up in the background once the
    program stops writing, so a later screen request has nothing left to draw."""
    lines = b"".join(b"line %d of a quiet backlog\r\n" % i for i in range(20_000))
    reference = VTParser(HardenedScreen(120, 40))
    reference.feed(lines)

    async def main() -> tuple[int, int, ScreenSnapshot]:
        screen = TerminalScreen(120, 40)
        for start in range(0, len(lines), 64 * 1024):
            screen.feed(lines[start : start + 64 * 1024])
        lazy = screen.backlog  # feeding alone emulated nothing (far under compact_at)
        deadline = time.monotonic() + 5
        while screen.backlog and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return lazy, screen.backlog, screen.snapshot_now()

    lazy, left, snap = asyncio.run(main())
    assert lazy == len(lines)
    assert left == 0
    assert snap == snapshot_of(reference.screen)
