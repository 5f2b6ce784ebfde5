"""Tables and progress for a person's terminal (frontend/person/term.py)."""

from __future__ import annotations

import io
import threading

from tests.helpers import poll
from tether.frontend.person.term import Progress, fit, table, visible, width


class FakeTTY(io.StringIO):
    """A stream that says it is a terminal, safe to read while a thread writes."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty
        self.lock = threading.Lock()

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        with self.lock:
            return super().write(text)

    def text(self) -> str:
        with self.lock:
            return self.getvalue()


def test_table_aligns_by_display_width() -> None:
    out = table(["ID", "COMMAND"], [["a", "echo 漢字漢字"], ["bb", "ls"]]).splitlines()
    assert out[1].index("echo") == out[2].index("ls") == out[0].index("COMMAND")
    cut = table(["ID", "COMMAND"], [["a", "x" * 50]], max_width=20).splitlines()[1]
    assert width(cut) == 20 and cut.endswith("…")
    assert width(fit("漢字漢字漢字", 5)) <= 5


def test_visible_draws_every_control_character() -> None:
    controls = [chr(c) for c in [*range(0x20), 0x7f, *range(0x80, 0xa0)] if chr(c) not in "\n\t"]
    shown = visible("".join(controls))
    assert shown == "".join(f"\\x{ord(c):02x}" for c in controls)
    assert shown.isprintable()
    assert visible("a\nb\tc") == "a ⏎ b c"
    assert visible("echo 漢字 ✓ é") == "echo 漢字 ✓ é"  # printable text, however wide, is kept
    assert visible(visible("\x1b[31m")) == visible("\x1b[31m") == "\\x1b[31m"
    # Bidirectional controls would reorder what follows them: shown, not obeyed.
    assert visible("ls \u202egnp.exe") == "ls \\u202egnp.exe"
    bidi = "".join(map(chr, [0x61C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
    assert visible(bidi).isprintable() and "\\u2069" in visible(bidi)
    row = table(["ID", "TITLE", "COMMAND"], [["\x1b[2J", "\x9b1m", "\x1b]2;t\x07"]])
    assert all(line.isprintable() for line in row.splitlines())
    assert row.splitlines()[1].split() == ["\\x1b[2J", "\\x9b1m", "\\x1b]2;t\\x07"]


def test_progress_draws_on_a_terminal_only() -> None:
    tty = FakeTTY(True)
    with Progress("waiting for the guardian", stream=tty):
        poll(lambda: "waiting for the guardian" in tty.text(), what="spinner")
    assert tty.text().endswith("\r\x1b[K")  # the line is cleared afterwards
    piped = FakeTTY(False)
    with Progress("waiting for the guardian", stream=piped) as progress:
        assert not progress.enabled
    assert piped.text() == ""


def test_plain_text_for_pipes_strips_sequences_across_chunks() -> None:
    from tether.frontend.person.tail import PlainText

    raw = b"\x1b[1;31mred\x1b[0m line\r\n\x1b]0;title\x07next\r\nlast\r\n"
    for cut in range(len(raw) + 1):  # every split point, as PTY reads may fall
        plain = PlainText()
        out = plain.feed(raw[:cut]) + plain.feed(raw[cut:]) + plain.flush()
        assert out == b"red line\nnext\nlast\n", cut
