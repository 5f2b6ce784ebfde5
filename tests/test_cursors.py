"""Signed cursors (shared/cursors.py): any edited byte is ``invalid_cursor``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.cursors import CursorSigner

SCOPE = {"p": "local", "w": "/ws", "t": "th_1", "e": "ex_1", "s": "output"}
SIGNER = CursorSigner(b"k" * 32)
CURSOR = SIGNER.sign(SCOPE, {"o": 12345})


def _refused(cursor: str) -> bool:
    try:
        SIGNER.verify(cursor, SCOPE)
    except TetherError as err:
        return err.code is ErrorCode.INVALID_CURSOR
    return False


def test_a_cursor_verifies_unchanged() -> None:
    assert SIGNER.verify(CURSOR, SCOPE) == {"o": 12345}


@pytest.mark.parametrize("edited", [
    CURSOR + "=", CURSOR + "==", CURSOR[:10] + "!!**" + CURSOR[10:], CURSOR.replace(".", ".~"),
    CURSOR.replace(".", "=."), " " + CURSOR, CURSOR + "\n", CURSOR.replace("-", "+"),
])
def test_padding_and_characters_outside_the_alphabet_are_refused(edited: str) -> None:
    """The lenient base64 decoder skipped them and the MAC still matched."""
    assert edited != CURSOR and _refused(edited)


@given(at=st.integers(min_value=0, max_value=len(CURSOR)),
       kind=st.sampled_from(["insert", "replace", "delete"]),
       char=st.characters(codec="utf-8"))
def test_any_one_character_edit_is_refused(at: int, kind: str, char: str) -> None:
    if kind == "insert":
        edited = CURSOR[:at] + char + CURSOR[at:]
    elif kind == "replace":
        edited = CURSOR[:at] + char + CURSOR[at + 1 :]
    else:
        edited = CURSOR[:at] + CURSOR[at + 1 :]
    if edited != CURSOR:
        assert _refused(edited)
