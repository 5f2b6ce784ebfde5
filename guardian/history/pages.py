"""Where a page of output may end (docs/tools.md read: pages end on UTF-8 boundaries).

A page is a raw journal range whose text is rendered on its own (``render_output``). Cut in
the middle of a UTF-8 character, the halves render as U+FFFD; cut in the middle of an escape
sequence, the renderer drops the first half and shows the second as text (``1mred``, a URL,
the ``B`` of ``ESC ( B``). So a page that has bytes after it stops before such a tail, and
so does a page at the live end of a running execution, whose tail is still being written.
A page whose text would outgrow its bound stops early too (:func:`render_page`).
"""

from __future__ import annotations

from tether.guardian.terminal.render import render_output

#: The longest escape sequence a page holds back (OSC 8 hyperlinks carry URLs of a few
#: hundred bytes; titles and colours far less). A longer one that is still open at a page's
#: end is released: its rest then shows as text, but a reader is never stalled behind a
#: sequence that never ends (an OSC 52 clipboard, a sixel image, a program that died in one).
MAX_HELD_SEQUENCE = 4096

_ESC = 0x1B
_BEL = 0x07
_CSI = 0x5B  # ESC [
_STRINGS = frozenset(b"]PX^_")  # OSC, DCS, SOS, PM, APC: they run to BEL or ST (ESC \)


def held_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` a page must hold back: an incomplete UTF-8
    character, or an escape sequence that later bytes would still complete (looked for in
    the last :data:`MAX_HELD_SEQUENCE` bytes). May be all of ``data``."""
    end = _utf8_end(data)
    # Any ESC ends or aborts the sequence before it (the renderer reads it so too), so only
    # the last ESC can begin an open sequence.
    esc = data.rfind(b"\x1b", max(0, end - MAX_HELD_SEQUENCE), end)
    if esc >= 0 and _sequence_open(data, esc, end):
        end = esc
    return len(data) - end


def utf8_safe_end(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character
    or an escape sequence, but never 0 for non-empty data: a page with bytes after it always
    moves the reader on (a page made of one open sequence is released whole)."""
    end = len(data) - held_tail(data)
    return end if end > 0 else len(data)


def render_page(raw: bytes, max_text_bytes: int) -> tuple[int, str]:
    """How many bytes of ``raw`` a page takes, and their rendered text: all of them, unless
    their text would be over ``max_text_bytes`` in UTF-8 (``limits.MAX_PAGE_TEXT_RATIO``).

    Then the page ends after the last line whose text fits: lines render on their own, so
    the next page renders the rest as one read would. Only a first line that alone is over
    the bound (pages of a few bytes) is cut inside, at the longest prefix that fits. Any
    page takes at least one byte (one byte renders to at most one U+FFFD, 3 bytes).
    """
    text = render_output(raw)
    if _fits(text, max_text_bytes):
        return len(raw), text
    stop = len(raw)
    if text.count("\n") == raw.count(b"\n"):  # each raw line is one line of text
        encoded = text.encode()
        newline = encoded.rfind(b"\n", 0, max_text_bytes)
        if newline >= 0:
            rest = raw.split(b"\n", encoded.count(b"\n", 0, newline + 1))[-1]
            return len(raw) - len(rest), encoded[: newline + 1].decode()
        stop = raw.find(b"\n") + 1 or stop  # the answer lies within the first line
    # Bisect for a long prefix that fits. A longer prefix may render shorter (a carriage
    # return overwrites), so it is not always the longest; it fits, which is all that counts.
    low, high = 1, stop
    while high - low > 1:
        middle = (low + high) // 2
        if _fits(render_output(raw[:middle]), max_text_bytes):
            low = middle
        else:
            high = middle
    # An open sequence or half a character at the cut renders to nothing or U+FFFD, so the
    # page without it still fits.
    cut = utf8_safe_end(raw[:low])
    return cut, render_output(raw[:cut])


def _fits(text: str, max_bytes: int) -> bool:
    """Whether ``text`` is at most ``max_bytes`` in UTF-8 (encoded only when it may not)."""
    if len(text) > max_bytes:
        return False
    return len(text) * 4 <= max_bytes or len(text.encode()) <= max_bytes


def _utf8_end(data: bytes) -> int:
    """``len(data)``, less an incomplete UTF-8 character at its end."""
    end = len(data)
    i = end - 1
    while i >= 0 and end - i <= 4 and (data[i] & 0xC0) == 0x80:  # continuation bytes
        i -= 1
    if i < 0:
        return end
    lead = data[i]
    # Only a valid lead byte can still be completed; anything else is already garbage.
    need = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    return i if end - i < need else end


def _sequence_open(data: bytes, esc: int, end: int) -> bool:
    """Whether the escape sequence at ``data[esc]`` is unfinished at ``end`` (and could
    still be finished by the bytes after it), read as ``render_output`` reads it."""
    if end - esc < 2:
        return True
    kind = data[esc + 1]
    if kind == _CSI:  # parameters, intermediates, then the final byte
        i = _skip(data, esc + 2, end, 0x30, 0x3F)
        return _skip(data, i, end, 0x20, 0x2F) == end
    if kind in _STRINGS:  # ends at BEL, or at ST, whose ESC would be the last ESC
        return data.find(_BEL, esc + 2, end) < 0
    if 0x20 <= kind <= 0x2F:  # ESC ( B and the like: intermediates, then the final byte
        return _skip(data, esc + 1, end, 0x20, 0x2F) == end
    return False  # a two-byte sequence, or a lone ESC the next byte already ended


def _skip(data: bytes, i: int, end: int, low: int, high: int) -> int:
    """The first index from ``i`` whose byte is outside ``low``-``high`` (or ``end``)."""
    while i < end and low <= data[i] <= high:
        i += 1
    return i
