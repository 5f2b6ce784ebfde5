"""Cutting a chunk of output where redraws begin (guardian/terminal/frames)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tether.guardian.terminal.frames import FRAME_STARTS, MAX_PIECES, MIN_PIECE, frame_pieces

BSU, HIDE = FRAME_STARTS


def test_two_frames_in_one_chunk_are_two_pieces() -> None:
    busy = HIDE + b"\x1b[H\x1b[2J working..."
    idle = HIDE + b"\x1b[H\x1b[2J > "
    assert frame_pieces(busy + idle) == [busy, idle]
    assert frame_pieces(b"plain text, no redraw") == [b"plain text, no redraw"]


def test_a_synchronized_update_and_its_hidden_cursor_begin_one_frame() -> None:
    frame = BSU + HIDE + b"x" * 40 + b"\x1b[?2026l"
    assert frame_pieces(b"tail of the last one" + frame + frame) == [
        b"tail of the last one", frame, frame]


def test_many_tiny_frames_are_cut_no_finer_than_the_last_few() -> None:
    frame = HIDE + b"y" * MIN_PIECE
    pieces = frame_pieces(frame * 50)
    assert len(pieces) == MAX_PIECES
    assert pieces[1:] == [frame] * (MAX_PIECES - 1)


@given(st.lists(st.sampled_from([BSU, HIDE, b"a", b"\x1b[", b"\n" * 20]), max_size=40))
def test_the_pieces_are_the_chunk(parts: list[bytes]) -> None:
    data = b"".join(parts) or b"-"
    pieces = frame_pieces(data)
    assert b"".join(pieces) == data and all(pieces)
