"""Unit tests for guardian.render: raw PTY output → text for a model."""

from __future__ import annotations

import pytest

from tether.guardian.terminal.render import render_output


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        # carriage returns overwrite, as on a terminal
        (b"\r10%\r50%\r100%", "100%"),
        (b"abc\rX", "Xbc"),
        (b"downloading 100%\r\x1b[Kdone\r\n", "done\n"),
        (b"12345\r\x1b[3Cx", "123x5"),
        (b"a\x1b[2K\rb", "b"),
        (b"abcdef\x1b[3D\x1b[KX", "abcX"),
        (b"abc\x1b[1K", "   "),
        # line endings
        (b"one\r\ntwo\r\n", "one\ntwo\n"),
        (b"one\ntwo", "one\ntwo"),
        (b"trailing\r", "trailing"),
        # backspaces move left and overwrite
        (b"abc\b\bX", "aXc"),
        (b"N\bNA\bA", "NA"),
        (b"_\bu_\bl", "ul"),
        (b"\b\bab", "ab"),
        # escape sequences disappear
        (b"\x1b[1;31mred\x1b[0m plain", "red plain"),
        (b"\x1b]0;title\x07after", "after"),
        (b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\", "link"),
        (b"\x1bP+q544e\x1b\\ok", "ok"),
        (b"\x1b[<1u\x1b[=1u\x1b[>1u\x1b[?u\x1b[>4;2mok", "ok"),
        (b"\x1b[?1049h\x1b[H\x1b[2Jscreen", "screen"),
        (b"\x1b(0\x1b)Bx\x1b7\x1b8", "x"),
        (b"cut \x1b[1", "cut "),
        (b"lone \x1b", "lone "),
        # column moves pad, controls that draw nothing vanish, tabs stay
        (b"\x1b[2GQuick\x1b[8Gsafety", " Quick safety"),
        (b"bell\x07 nul\x00 del\x7f", "bell nul del"),
        (b"a\tb", "a\tb"),
        # UTF-8, including invalid bytes
        ("café ❤️ 中文".encode(), "café ❤️ 中文"),
        (b"bad \xff\xfe end", "bad \ufffd\ufffd end"),
        (b"", ""),
    ],
)
def test_render_output(raw: bytes, text: str) -> None:
    assert render_output(raw) == text


def test_max_chars_keeps_the_tail() -> None:
    raw = b"".join(b"line %d\r\n" % i for i in range(100))
    full = render_output(raw)
    assert render_output(raw, max_chars=20) == full[-20:]
    assert render_output(raw, max_chars=20).endswith("line 99\n")
    assert render_output(raw, max_chars=10**9) == full
    assert render_output(raw, max_chars=0) == ""
    with pytest.raises(ValueError, match="max_chars"):
        render_output(raw, max_chars=-1)


def test_progress_lines_keep_their_last_state() -> None:
    progress = b"".join(b"\rdownloading %3d%%" % i for i in range(101))
    raw = b"start\r\n" + progress + b"\r\n" + b"\x1b[32mdone\x1b[0m\r\n"
    assert render_output(raw) == "start\ndownloading 100%\ndone\n"


@pytest.mark.parametrize(
    "raw",
    [
        b"x" * 500_000 + b"\ry" * 250_000,  # one line overwritten a quarter of a million times
        b"x" * 500_000 + b"\x1b[1K" * 150_000,  # erase-to-cursor over a long line, again and again
        b"x" * 500_000 + b"\by" * 250_000,
        b"\x1b[500Gx\r\x1b[K" * 70_000,  # column jumps far to the right
        bytes(range(256)) * 4096,  # every byte value
    ],
)
def test_hostile_megabyte_is_rendered(raw: bytes) -> None:
    """Work is linear in the input: these finish quickly (pytest-timeout guards the suite)."""
    text = render_output(raw, max_chars=100)
    assert len(text) <= 100


def test_hostile_lines_render_like_a_terminal() -> None:
    assert render_output(b"x" * 10 + b"\ry" * 5) == "y" + "x" * 9
    assert render_output(b"x" * 10 + b"\x1b[1K" * 3) == " " * 10
    assert render_output(b"x" * 10 + b"\by" * 5) == "x" * 9 + "y"
    assert render_output(b"\x1b[5Gx\r\x1b[K" * 3 + b"z") == "z"
