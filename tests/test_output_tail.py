"""The output tail a command's result carries: where it starts, and that paging up to that
start misses nothing (guardian/history/records.output_tail)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.guardian.history.journal import Journal
from tether.guardian.history.records import RESULT_TAIL_BYTES, RESULT_TAIL_CHARS, output_tail
from tether.guardian.terminal.render import render_output


def _tail_of(tmp_path: Path, data: bytes) -> dict[str, Any]:
    journal = Journal(tmp_path, "ex_tail", new=True)
    journal.append(data)
    return output_tail(journal)


def _misses_nothing(data: bytes, tail: dict[str, object]) -> None:
    """Every byte from ``start`` on is in the text shown (a byte or two may be in both)."""
    start = tail["start"]
    assert isinstance(start, int) and isinstance(tail["text"], str)
    assert tail["text"].endswith(render_output(data[start:]))


def test_short_output_is_whole(tmp_path: Path) -> None:
    tail = _tail_of(tmp_path, b"one\r\ntwo\r\n")
    assert tail == {"text": "one\ntwo\n", "start": 0, "end": 10, "truncated": False,
                    "retained_start": 0}


@pytest.mark.parametrize("lines", [30_000, 3_000])  # the byte window cut, or the text limit
def test_a_cut_tail_starts_at_a_whole_line(tmp_path: Path, lines: int) -> None:
    data = b"".join(b"\x1b[31mline %05d\x1b[0m\r\n" % i for i in range(lines))
    tail = _tail_of(tmp_path, data)
    start = tail["start"]
    assert tail["truncated"] and isinstance(start, int) and start > 0
    assert data[start - 2 : start] == b"\r\n"
    assert tail["text"] == render_output(data[start:])
    assert len(str(tail["text"])) > RESULT_TAIL_CHARS // 2


def test_a_split_character_at_the_window_is_not_shown(tmp_path: Path) -> None:
    line = "é" * 99 + "\r\n"  # 200 bytes: the window starts inside a two-byte character
    data = line.encode() * (RESULT_TAIL_BYTES // 200 + 50)
    data = b"x" + data  # shift by one byte
    tail = _tail_of(tmp_path, data)
    assert "\ufffd" not in str(tail["text"])
    assert str(tail["text"]).startswith("é" * 99 + "\n")
    _misses_nothing(data, tail)


def test_a_line_longer_than_the_tail_shows_its_end(tmp_path: Path) -> None:
    data = "é".encode() * 50_000 + b"\r\ndone\r\n"
    tail = _tail_of(tmp_path, data)
    text = str(tail["text"])
    assert tail["truncated"] and text.endswith("é\ndone\n")
    assert len(text) == RESULT_TAIL_CHARS
    _misses_nothing(data, tail)
    start = tail["start"]
    assert isinstance(start, int) and start <= len(data) - len(text.encode())


def test_a_string_sequence_across_lines_falls_back_to_characters(tmp_path: Path) -> None:
    # An OSC title with a newline inside: rendering drops it whole, so lines do not map.
    data = b"".join(b"row %05d\r\n" % i for i in range(5_000)) + b"\x1b]0;a\nb\x07end\r\n"
    tail = _tail_of(tmp_path, data)
    assert str(tail["text"]).endswith("row 04999\nend\n")
    _misses_nothing(data, tail)


@pytest.mark.parametrize("line", [
    b"".join(b"\rfile%03d %d%%" % (0, p) for p in range(101)) + b"\r\n",  # a progress bar
    b"\x1b[38;5;196mE\x1b[0m\r\n",  # colours around one character
], ids=["progress", "colours"])
def test_a_window_that_renders_short_starts_at_a_whole_line(tmp_path: Path, line: bytes) -> None:
    data = line * (3 * RESULT_TAIL_BYTES // len(line))
    tail = _tail_of(tmp_path, data)
    start = tail["start"]
    assert isinstance(start, int) and tail["truncated"]
    # A whole line, not the window's cut one; a cut line redrawn with CR inside the window
    # shows its last drawing whole, and is kept from the window's start.
    assert data[start - 2 : start] == b"\r\n" or (
        start == len(data) - RESULT_TAIL_BYTES and tail["text"].startswith("file000 100%\n"))
    assert tail["text"] == render_output(data[start:])
    assert len(data) - start > RESULT_TAIL_BYTES // 2  # most of the window, not its end


def test_a_short_window_of_one_line_is_shown_whole(tmp_path: Path) -> None:
    data = b"\r".join(b"%06d" % i for i in range(20_000))  # one line, no newline at all
    tail = _tail_of(tmp_path, data)
    assert tail["start"] == len(data) - RESULT_TAIL_BYTES
    assert tail["text"] == render_output(data[-RESULT_TAIL_BYTES:])


def test_a_progress_line_redrawn_past_the_window_keeps_its_last_drawing(tmp_path: Path) -> None:
    """A progress bar redrawn with CR over more than the byte window: the window's first line
    began before it, but its last drawing is in the window and is what the terminal shows
    (before: dropped as a partial line, and with it the bar's final 100%)."""
    bar = b"".join(b"\rDownloading %5.1f%% [%-40s]" % (i / 16, b"#" * (i // 40))
                   for i in range(1601))
    data = bar + b"\r\nSaved model.bin\r\nexit=0\r\n"
    assert len(bar) > RESULT_TAIL_BYTES
    tail = _tail_of(tmp_path, data)
    assert tail["truncated"] is True
    assert tail["text"] == f"Downloading 100.0% [{'#' * 40}]\nSaved model.bin\nexit=0\n"
    _misses_nothing(data, tail)
