"""Raw PTY bytes → calls on a :class:`~guardian.screen_vt.HardenedScreen`.

pyte's own stream parses one character at a time through a generator, prints the parameters of
sequences it does not know (``ESC[<1u`` shows ``1u``, ``ESC[!p`` shows ``p``, SGR with colons
shows ``2::255:0:0m``) and lets DCS/APC payloads through as text. This parser is a small table
over compiled regular expressions instead:

- text runs are decoded and drawn in one call; UTF-8 split across feeds is held back;
- every ``ESC`` starts a new token (it aborts an unfinished string, as in DEC's parser), so a
  byte-level search for ``ESC c`` or ``ESC[2J`` always finds real tokens — the lazy screen's
  skip rules rely on that;
- an unfinished token at the end of a feed is held back in :attr:`VTParser.tail` (bounded: a
  string payload keeps only its first :data:`STRING_CAP` bytes, which are all it uses), so any
  split of a stream into feeds gives the same calls as feeding it whole.
"""

from __future__ import annotations

import re

from tether.guardian.terminal.vt import HardenedScreen

Bytes = bytes | bytearray | memoryview

STRING_CAP = 4096
_PARAM_LIMIT = 9999

_TEXT = re.compile(rb"[\x20-\x7e\x80-\xff]+")
# Bounded so that the decision "complete / unfinished / malformed" never needs more than a
# few dozen bytes: xterm caps parameters too, and the bound keeps the held tail small.
_CSI = re.compile(rb"\x1b\[([\x30-\x3f]{0,64})([\x20-\x2f]{0,4})([\x40-\x7e])")
_CSI_OPEN = re.compile(rb"\x1b\[[\x30-\x3f]{0,64}[\x20-\x2f]{0,4}")
_ESC_INTER = re.compile(rb"\x1b([\x20-\x2f]{1,4})([\x30-\x7e])")
_ESC_INTER_OPEN = re.compile(rb"\x1b[\x20-\x2f]{1,4}")
_STRING_BODY = re.compile(rb"[^\x07\x18\x1a\x1b]*")
_STRING_STARTS = frozenset(b"]PX^_")
_NOT_PARAM = b"0123456789;:"


def _ints(body: bytes) -> list[int]:
    """``1;;25`` → ``[1, 0, 25]``; colon sub-parameters are dropped (only SGR uses them)."""
    if not body:
        return []
    return [min(int(part.split(b":", 1)[0] or 0), _PARAM_LIMIT) for part in body.split(b";")]


def sgr_params(body: bytes) -> list[int]:
    """SGR parameters in the flat form pyte understands.

    Colon forms (``38:2::r:g:b``, ``4:3``) are flattened, and underline colour (58), which
    pyte would misread as blink plus a colour, is dropped.
    """
    flat: list[int] = []
    for part in body.split(b";") if body else [b""]:
        if b":" not in part:
            flat.append(min(int(part or 0), _PARAM_LIMIT))
            continue
        sub = [min(int(x or 0), _PARAM_LIMIT) for x in part.split(b":")]
        head = sub[0]
        if head in (38, 48) and sub[1:2] == [5] and len(sub) >= 3:
            flat += [head, 5, sub[2]]
        elif head in (38, 48) and sub[1:2] == [2] and len(sub) >= 5:
            flat += [head, 2, *sub[-3:]]  # the colour-space id, when present, is skipped
        elif head == 4:
            flat.append(4 if sub[1] else 24)
        elif head != 58:
            flat.append(head)
    clean: list[int] = []
    i = 0
    while i < len(flat):
        value = flat[i]
        width = 1
        if value in (38, 48, 58) and i + 1 < len(flat):
            width = {5: 3, 2: 5}.get(flat[i + 1], 1)
        if value != 58:
            clean += flat[i : i + width]
        i += width
    return clean


class VTParser:
    """Feeds raw bytes to a :class:`HardenedScreen`, one complete token at a time."""

    def __init__(self, screen: HardenedScreen) -> None:
        self.screen = screen
        self.tail = b""  # an unfinished token (or UTF-8 character) from the previous feed

    def feed(self, data: Bytes) -> None:
        """Emulate ``data``; an unfinished token at its end waits for the next feed."""
        if self.tail:
            data = self.tail + bytes(data)
            self.tail = b""
        n = len(data)
        pos = 0
        step = self.step
        while pos < n:
            pos = step(data, pos, n)

    def step(self, data: Bytes, pos: int, n: int) -> int:
        """Dispatch the token at ``pos``; return where the next one starts.

        An unfinished token is stored in :attr:`tail` and ``n`` is returned.
        """
        byte = data[pos]
        screen = self.screen
        if byte >= 0x20 and byte != 0x7F:
            match = _TEXT.match(data, pos, n)
            assert match is not None
            end = match.end()
            held = _unfinished_utf8(data, pos, end) if end == n else 0
            if held:
                self.tail = bytes(data[end - held : end])
                end -= held
            if end > pos:
                screen.draw(str(data[pos:end], "utf-8", "replace"))
            return n if held else end
        # REP repeats the character drawn just before it; any other token forgets it.
        previous, screen.last_char = screen.last_char, None
        end = self._escape_or_control(data, pos, n, previous)
        if self.tail:
            screen.last_char = previous  # unfinished: the token has not happened yet
        return end

    def _escape_or_control(self, data: Bytes, pos: int, n: int, previous: str | None) -> int:
        byte = data[pos]
        if byte != 0x1B:
            self._control(byte)
            return pos + 1
        if pos + 1 >= n:
            self.tail = b"\x1b"
            return n
        kind = data[pos + 1]
        if kind == 0x5B:  # [
            return self._csi(data, pos, n, previous)
        if kind in _STRING_STARTS:
            return self._string(data, pos, n)
        if 0x20 <= kind <= 0x2F:
            return self._escape_intermediate(data, pos, n)
        if 0x30 <= kind <= 0x7E:
            self._escape(kind)
            return pos + 2
        return pos + 1  # ESC before a control or non-ASCII byte: the ESC is dropped

    # -- token kinds ------------------------------------------------------------------------

    def _hold(self, data: Bytes, pos: int, n: int) -> int:
        self.tail = bytes(data[pos:n])
        return n

    def _control(self, byte: int) -> None:
        screen = self.screen
        if byte == 0x0D:
            screen.carriage_return()
        elif byte in (0x0A, 0x0B, 0x0C):
            screen.linefeed()
        elif byte == 0x08:
            screen.backspace()
        elif byte == 0x09:
            screen.tab()
        elif byte == 0x0E:
            screen.shift_out()
        elif byte == 0x0F:
            screen.shift_in()
        # BEL, NUL, DEL, ENQ and the rest change nothing on screen.

    def _escape(self, kind: int) -> None:
        screen = self.screen
        if kind == 0x37:  # 7
            screen.save_cursor()
        elif kind == 0x38:  # 8
            screen.restore_cursor()
        elif kind == 0x63:  # c
            screen.reset()
        elif kind == 0x44:  # D
            screen.index()
        elif kind == 0x45:  # E: NEL is CR + LF whatever LNM says
            screen.carriage_return()
            screen.index()
        elif kind == 0x48:  # H
            screen.set_tab_stop()
        elif kind == 0x4D:  # M
            screen.reverse_index()
        # ESC = / ESC > (keypad), ESC \ (lone ST), SS2/SS3 and others: nothing on screen.

    def _escape_intermediate(self, data: Bytes, pos: int, n: int) -> int:
        match = _ESC_INTER.match(data, pos, n)
        if match is None:
            open_ = _ESC_INTER_OPEN.match(data, pos, n)
            assert open_ is not None
            return self._hold(data, pos, n) if open_.end() == n else open_.end()
        inter, final = match.group(1), match.group(2)
        if inter in (b"(", b")"):
            self.screen.define_charset(final.decode("latin-1"), inter.decode("latin-1"))
        elif inter == b"#" and final == b"8":
            self.screen.alignment_display()
        return match.end()

    def _string(self, data: Bytes, pos: int, n: int) -> int:
        """OSC, DCS, SOS, PM, APC: a payload up to BEL or ST; ESC, CAN or SUB end it early."""
        body = _STRING_BODY.match(data, pos + 2, n)
        assert body is not None  # the pattern matches the empty string
        body_end = body.end()
        if body_end == n or (data[body_end] == 0x1B and body_end + 1 == n):
            # Unfinished: keep the header and the only payload bytes that will ever be used.
            keep = min(body_end, pos + 2 + STRING_CAP)
            self.tail = bytes(data[pos:keep]) + (b"\x1b" if body_end < n else b"")
            return n
        end = body_end + 1  # BEL, CAN or SUB are part of the string
        if data[body_end] == 0x1B:
            # ST ends the string; any other ESC ends it too but starts the next token.
            end = body_end + 2 if data[body_end + 1] == 0x5C else body_end
        if data[pos + 1] == 0x5D:
            self._osc(bytes(data[pos + 2 : min(body_end, pos + 2 + STRING_CAP)]))
        return end

    def _osc(self, payload: bytes) -> None:
        number, _, text = payload.partition(b";")
        if number not in (b"0", b"1", b"2"):
            return  # hyperlinks, shell integration, colour queries: nothing on screen
        title = "".join(ch for ch in text.decode("utf-8", "replace") if ch >= " ")
        if number in (b"0", b"2"):
            self.screen.set_title(title)
        if number in (b"0", b"1"):
            self.screen.set_icon_name(title)

    def _csi(self, data: Bytes, pos: int, n: int, previous: str | None) -> int:
        match = _CSI.match(data, pos, n)
        if match is None:
            open_ = _CSI_OPEN.match(data, pos, n)
            assert open_ is not None
            # Unfinished, or malformed: drop what was parsed, the offending byte goes on.
            return self._hold(data, pos, n) if open_.end() == n else open_.end()
        params, inter, final = match.groups()
        if final == b"b" and not inter and (not params or params.isdigit()):
            if previous is not None:  # REP
                self.screen.repeat_char(previous, int(params or 1))
        else:
            self._dispatch_csi(params, inter, final[0])
        return match.end()

    def _dispatch_csi(self, params: bytes, inter: bytes, final: int) -> None:
        """Apply one CSI sequence (parameter bytes, intermediate bytes, final byte)."""
        lead = params[:1] if params[:1] in (b"<", b"=", b">", b"?") else b""
        body = params[len(lead) :]
        if body.translate(None, _NOT_PARAM):
            return  # a private marker in the middle: not a sequence anyone sends
        screen = self.screen
        if inter:
            if inter == b"!" and final == 0x70 and not lead:  # DECSTR
                screen.soft_reset()
            return  # DECSCUSR, DECRQM, ...: nothing on screen
        if lead == b"?":
            self._csi_private(body, final)
        elif lead == b">":
            if final == 0x63 and (_ints(body) or [0])[0] == 0:
                screen.report_device_attributes(0, secondary=True)
            # ``CSI > Ps u`` (kitty push), ``CSI > Ps m`` (modifyOtherKeys), XTVERSION: ignored.
        elif not lead:
            if final == 0x6D:
                screen.select_graphic_rendition(*sgr_params(body))
            else:
                self._csi_plain(_ints(body), final)
        # ``CSI < ... u`` and ``CSI = ... u`` (kitty keyboard protocol): consumed, ignored.

    def _csi_private(self, body: bytes, final: int) -> None:
        screen = self.screen
        values = _ints(body)
        if final == 0x68:  # h
            screen.set_mode(*values, private=True)
        elif final == 0x6C:  # l
            screen.reset_mode(*values, private=True)
        elif final == 0x4A:  # DECSED
            screen.erase_in_display(values[0] if values else 0)
        elif final == 0x4B:  # DECSEL
            screen.erase_in_line(values[0] if values else 0)
        # ``CSI ? u`` (kitty query), DECXCPR, XTSAVE/XTRESTORE, ...: no reply, no change.

    def _csi_plain(self, values: list[int], final: int) -> None:
        screen = self.screen
        first = values[0] if values else 0
        char = chr(final)
        if char in "ABCDEFGIPLMSXZ@`ade":
            count = first or 1
            if char == "A":
                screen.cursor_up(count)
            elif char in "Be":
                screen.cursor_down(count)
            elif char in "Ca":
                screen.cursor_forward(count)
            elif char == "D":
                screen.cursor_back(count)
            elif char == "E":
                screen.cursor_down1(count)
            elif char == "F":
                screen.cursor_up1(count)
            elif char in "G`":
                screen.cursor_to_column(count)
            elif char == "I":
                screen.tab_forward(count)
            elif char == "P":
                screen.delete_characters(count)
            elif char == "L":
                screen.insert_lines(count)
            elif char == "M":
                screen.delete_lines(count)
            elif char == "S":
                screen.scroll_up(count)
            elif char == "X":
                screen.erase_characters(count)
            elif char == "Z":
                screen.tab_back(count)
            elif char == "@":
                screen.insert_characters(count)
            elif char == "d":
                screen.cursor_to_line(count)
        elif char in "Hf":
            screen.cursor_position(*values[:2])
        elif char == "J":
            screen.erase_in_display(first)
        elif char == "K":
            screen.erase_in_line(first)
        elif char == "T" and len(values) <= 1:  # more parameters: mouse tracking, not SD
            screen.scroll_down(first or 1)
        elif char == "c" and first == 0:
            screen.report_device_attributes(0)
        elif char == "n":
            screen.report_device_status(first)
        elif char == "g":
            screen.clear_tab_stop(first)
        elif char == "h":
            screen.set_mode(*values)
        elif char == "l":
            screen.reset_mode(*values)
        elif char == "r":
            screen.set_margins(*values[:2])
        elif char == "s" and not values:
            screen.save_cursor()
        elif char == "u" and not values:
            screen.restore_cursor()


def _unfinished_utf8(data: Bytes, start: int, end: int) -> int:
    """How many bytes at ``data[:end]``'s end start a UTF-8 character that is not complete."""
    for back in range(1, 4):
        i = end - back
        if i < start:
            return 0
        byte = data[i]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for the lead byte
        if byte >= 0xC0:
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4 if byte < 0xF8 else 0
            return back if need > back else 0
        return 0
    return 0
