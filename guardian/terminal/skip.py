"""Skip rules for the lazy screen: bytes that cannot change what the screen ends up showing.

Each rule below skips bytes only where the state they would set is known without emulating
them, so the result (text, cursor, alternate flag, title, modes, attributes) is the same as
emulating every byte. They all rest on one property of :mod:`guardian.screen_parser`: every
``ESC`` byte starts a token, so a byte search for a sequence finds real tokens only.

Reset cut
    Everything before the last ``ESC c`` (RIS): a full reset leaves nothing of what came before.

Clear cut
    Everything before the last "home + erase display" (``ESC[H ESC[2J`` or
    ``ESC[2J [ESC[3J] ESC[H``) after the last *trigger* — a token whose effect depends on the
    cursor position, switches buffers, saves or restores state, or asks for a reply. The skipped
    bytes still set modes, margins, charsets, title and attributes, so those tokens are replayed
    (found by C-speed searches); text, cursor motion and editing need not be, because the
    erase blanks the buffer and the home puts the cursor back.

Line run
    In a long run of "line-local" tokens — text, CR, LF, BS, HT, SGR, EL — once the cursor is in
    the scroll region, only the last rows of the run stay visible: every row still on screen at
    the end was scrolled in blank during the run's tail. The middle of the run is skipped:
    SGR attributes are replayed, the cursor goes to column 0 (the cut is just after a CR) and
    enough LFs remain to scroll every stale row away.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from tether.guardian.terminal.parser import VTParser

_LINE_LOCAL = bytes(
    b for b in range(256) if b in (0x08, 0x09, 0x0A, 0x0D) or 0x20 <= b <= 0x7E or b >= 0x80
)
_LINE_LOCAL_AND_ESC = _LINE_LOCAL + b"\x1b"
_SGR_EL_PARAMS = b"0123456789;:"

_SGR = re.compile(rb"\x1b\[[0-9;:]*m")
_SGR_RESETS = (b"\x1b[m", b"\x1b[0m", b"\x1b[0;")
_SGR_WELL_FORMED = re.compile(rb"\x1b\[[0-9;:]{0,64}m")  # longer ones the parser drops

_HOMES = (b"\x1b[H", b"\x1b[1;1H", b"\x1b[;H", b"\x1b[1H", b"\x1b[0;0H")
_CLEAR = b"\x1b[2J"
_CLEAR_TRIES = 16

# Tokens whose effect a clear cut cannot summarise: they read the cursor (DECSC, HTS, TBC,
# queries), restore or reset state (DECRC, RIS, DECSTR), switch buffers or reverse the screen
# (private modes 5, 47, 1047, 1048, 1049), or are locking shifts (SO/SI could be string bytes).
_TRIGGER = re.compile(
    rb"\x1b[78cH]"
    rb"|\x1b\[[0-9;:]*[gsucn]"
    rb"|\x1b\[>[0-9;:]*c"
    rb"|\x1b\[[\x30-\x3f]{0,64}!p"
    rb"|\x1b\[\?(?:[0-9;:]*;)?0*(?:5|47|104[789])(?::[0-9:]*)?(?:;[0-9;:]*)?[hl]"
    rb"|[\x0e\x0f]"
)
# Tokens a clear cut replays, in order: modes, margins, charsets, window title.
_STATEFUL = re.compile(rb"\x1b\[\??[0-9;:]*[hlr]|\x1b[()][\x30-\x7e]|\x1b\][012]")


def reset_cut(data: bytes, limit: int) -> int:
    """Position of the last ``ESC c`` starting before ``limit``, or -1."""
    return data.rfind(b"\x1bc", 0, limit)


def clear_cut(data: bytes, start: int, limit: int) -> int:
    """Start of the last "home + erase display" in ``data[start:limit]``, or -1."""
    end = limit
    for _ in range(_CLEAR_TRIES):
        at = data.rfind(_CLEAR, start, end)
        if at < 0:
            return -1
        for home in _HOMES:
            if at - len(home) >= start and data[at - len(home) : at] == home:
                return at - len(home)
        after = at + len(_CLEAR)
        if data[after : after + 4] == b"\x1b[3J":
            after += 4
        if any(data[after : after + len(home)] == home for home in _HOMES):
            return at
        end = at
    return -1


def last_trigger_end(data: bytes, start: int, end: int) -> int:
    """End of the last trigger token in ``data[start:end]`` (``start`` when there is none)."""
    last = start
    for match in _TRIGGER.finditer(data, start, end):
        last = match.end()
    return last


def replay_state(parser: VTParser, data: bytes, start: int, end: int) -> None:
    """Apply what ``data[start:end]`` does to modes, margins, charsets, title and SGR."""
    n = len(data)
    for match in _STATEFUL.finditer(data, start, end):
        parser.step(data, match.start(), n)
    replay_sgr(parser, data, start, end)
    parser.tail = b""  # an unfinished token there is aborted by the ESC that follows


def replay_sgr(parser: VTParser, data: bytes, start: int, end: int) -> None:
    """Apply the SGR tokens of ``data[start:end]``, from the last full reset on."""
    origin = data.rfind(b"\x1b", start, end)  # one byte: memrchr, fast over plain text
    if origin < 0:
        return
    while origin >= 0 and not (
        data.startswith(_SGR_RESETS, origin) and _SGR_WELL_FORMED.match(data, origin)
    ):
        origin = data.rfind(b"\x1b", start, origin)
    n = len(data)
    for match in _SGR.finditer(data, max(origin, start), end):
        parser.step(data, match.start(), n)


def line_runs(data: bytes, start: int, end: int, block: int) -> Iterator[tuple[int, int]]:
    """Runs of at least two blocks holding line-local tokens only.

    Blocks end just after an LF, so no SGR straddles two blocks (an LF ends any CSI).
    """
    if end - start >= 2 * block and line_local(data[start:end]):
        yield start, end  # the common case of one long run: one pass over the bytes
        return
    run = -1
    pos = start
    while pos < end:
        stop = data.find(b"\n", min(pos + block, end) - 1, end) + 1 or end
        if line_local(data[pos:stop]):
            if run < 0:
                run = pos
        else:
            if run >= 0 and pos - run >= 2 * block:
                yield run, pos
            run = -1
        pos = stop
    if run >= 0 and end - run >= 2 * block:
        yield run, end


def line_local(chunk: bytes) -> bool:
    """Does ``chunk`` hold line-local tokens only (text, CR, LF, BS, HT, SGR, EL)?"""
    if chunk.translate(None, _LINE_LOCAL_AND_ESC):
        return False
    escapes = chunk.count(b"\x1b")
    if not escapes:
        return True
    if chunk.count(b"\x1b[") != escapes:
        return False  # ESC 7 and friends would hide behind the digit deletion below
    # With parameters deleted, SGR and EL read "ESC[m" and "ESC[K": every ESC must begin one.
    squeezed = chunk.translate(None, _SGR_EL_PARAMS)
    return squeezed.count(b"\x1b[m") + squeezed.count(b"\x1b[K") == escapes


def run_jump(parser: VTParser, data: bytes, head: int, end: int) -> int:
    """Where emulation of the line run ``data[head:end]`` may resume, or -1.

    ``head`` is a token boundary just after an LF, already emulated, with the cursor on
    ``row``. The target is just after a CR (so column 0 in both worlds) followed by
    ``bottom - row`` LFs, which take the cursor to the bottom margin, and then one LF per row
    of the scroll region, each scrolling in a blank row: every row of the region at the end
    was then written by the emulated tail alone, whatever the skipped middle left behind.
    """
    screen = parser.screen
    if parser.tail:
        return -1
    top, bottom = screen.margins or (0, screen.lines - 1)
    row = screen.cursor.y
    if not top <= row <= bottom:
        return -1  # outside the region text overwrites rows that never scroll away
    at = end
    for _ in range((bottom - row) + (bottom - top + 1)):
        at = data.rfind(b"\n", head, at)
        if at < 0:
            return -1
    cr = data.rfind(b"\r", head, at)
    return cr + 1 if cr >= 0 else -1


def jump_to(parser: VTParser, data: bytes, head: int, target: int) -> None:
    """Skip ``data[head:target]`` of a line run (see :func:`run_jump`)."""
    replay_sgr(parser, data, head, target)
    screen = parser.screen
    screen.carriage_return()
    screen.last_char = None
