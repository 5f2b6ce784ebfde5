"""The marker scanner reads OSC strings the way a terminal does (guardian/runtime/markers.py):
an ESC inside one ends it, so a program's unfinished sequence cannot swallow the shell's own
markers."""

from __future__ import annotations

import pytest

from tether.guardian.runtime.markers import Marker, MarkerScanner

NONCE = "0123456789abcdef"
END = f"\x1b]133;D;3;aid={NONCE}\x07".encode()
PROMPT = f"\x1b]133;A;aid={NONCE}\x07".encode()


def _scan(*chunks: bytes) -> list[bytes | Marker]:
    scanner = MarkerScanner(NONCE)
    pieces: list[bytes | Marker] = []
    for chunk in chunks:
        pieces += scanner.feed(chunk)
    merged: list[bytes | Marker] = []
    for piece in pieces:  # byte runs may come split: join neighbours
        if isinstance(piece, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


@pytest.mark.parametrize("unfinished", [
    b"\x1b]0;a title without its BEL",  # what `printf '\e]0;abc'` leaves
    b"\x1b]8;;http://x",  # a hyperlink cut short
    b"\x1b]",
    b"\x1b]0;t\x18",  # CAN cancels it
])
def test_an_unfinished_sequence_does_not_swallow_the_markers(unfinished: bytes) -> None:
    stream = b"out " + unfinished + END + PROMPT + b"$ "
    expected: list[bytes | Marker] = [b"out " + unfinished, Marker("D", 3), Marker("A"), b"$ "]
    assert _scan(stream) == expected
    for cut in range(1, len(stream)):  # any split into two reads gives the same
        assert _scan(stream[:cut], stream[cut:]) == expected, cut


def test_terminated_sequences_are_output_and_markers_are_found() -> None:
    title = b"\x1b]0;title\x1b\\"  # ended by ST (ESC \)
    link = b"\x1b]8;;http://x\x07"
    assert _scan(title + b"a" + link + END) == [title + b"a" + link, Marker("D", 3)]


def test_a_marker_with_another_nonce_is_output() -> None:
    other = b"\x1b]133;D;0;aid=ffffffffffffffff\x07"
    assert _scan(other + END) == [other, Marker("D", 3)]


def test_a_long_unfinished_sequence_passes_and_the_marker_after_it_is_found() -> None:
    long_title = b"\x1b]0;" + b"a" * 9000  # longer than any marker held back
    stream = long_title + END + PROMPT
    expected: list[bytes | Marker] = [long_title, Marker("D", 3), Marker("A")]
    for cut in (len(long_title), len(long_title) + 1, len(long_title) + 5, 100):
        assert _scan(stream[:cut], stream[cut:]) == expected, cut
