"""Shell-integration markers: the rc file Tether starts bash with, and the marker scanner.

The rc file sources the user's own rc (dotfiles are never modified), then installs OSC 133
markers: ``A`` at each prompt, ``C`` when a command line starts running (from ``PS0``) and
``D;<exit>`` when it finishes, followed by an OSC 7 cwd report. Every marker carries a
per-shell nonce (``aid=``) so output that merely contains OSC 133 (a nested shell, ``cat``
of a recording) can never end a command early.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

RC_TEMPLATE = r"""# Tether shell integration (generated; your own rc files are sourced, never changed).
if [ -f /etc/bash.bashrc ]; then . /etc/bash.bashrc; fi
if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
# Tether types ` . <command file>`; keep those lines out of the user's history.
HISTCONTROL="ignorespace${HISTCONTROL:+:$HISTCONTROL}"
__tether_cmd=0
__tether_prompt() {
  local s=$?
  if [ "$__tether_cmd" = 1 ]; then printf '\e]133;D;%s;aid=@NONCE@\a' "$s"; __tether_cmd=0; fi
  printf '\e]7;file://%s%s\a' "${HOSTNAME:-localhost}" "$PWD"
}
PROMPT_COMMAND="__tether_prompt${PROMPT_COMMAND:+;$PROMPT_COMMAND}"
# PS0 is expanded just before a command line runs: print C, and set the flag through an
# arithmetic side effect inside an empty substring expansion (PS0 output must stay empty).
PS0='\e]133;C;aid=@NONCE@\a${__tether_cmd:0:$((__tether_cmd=1,0))}'"${PS0:-}"
PS1='\[\e]133;A;aid=@NONCE@\a\]'"${PS1:-\\$ }"
"""


def rc_text(nonce: str) -> str:
    """The rc file for a shell whose markers carry ``nonce``."""
    return RC_TEMPLATE.replace("@NONCE@", nonce)


@dataclass(frozen=True, slots=True)
class Marker:
    """One recognised marker: ``kind`` is ``A``, ``C``, ``D`` or ``cwd``."""

    kind: str
    exit_code: int | None = None
    cwd: str | None = None


#: The longest escape sequence we hold back waiting for its end before giving up on it.
_MAX_MARKER = 8192
_OSC = b"\x1b]"


class MarkerScanner:
    """Splits PTY output into plain byte runs and markers, across chunk boundaries.

    The common chunk has no OSC at all and costs one ``bytes.find``.
    """

    def __init__(self, nonce: str) -> None:
        self._tag = f"aid={nonce}".encode()
        self._carry = b""

    def feed(self, data: bytes) -> Iterator[bytes | Marker]:
        """Yield byte runs and markers in stream order."""
        if self._carry:
            data = self._carry + data
            self._carry = b""
        pos = 0
        while True:
            start = data.find(_OSC, pos)
            if start < 0:
                if pos < len(data):
                    yield data[pos:] if pos else data
                return
            end, term_len = _find_terminator(data, start + 2)
            if end < 0:
                if len(data) - start < _MAX_MARKER:
                    if start > pos:
                        yield data[pos:start]
                    self._carry = data[start:]
                    return
                # Unterminated and huge: not one of ours; pass it through.
                yield data[pos:]
                return
            marker = self._parse(data[start + 2 : end])
            if marker is None:
                # Some other OSC (a title, a hyperlink): ordinary output.
                yield data[pos : end + term_len]
            else:
                if start > pos:
                    yield data[pos:start]
                yield marker
            pos = end + term_len

    def _parse(self, body: bytes) -> Marker | None:
        if body.startswith(b"133;"):
            fields = body[4:].split(b";")
            if self._tag not in fields:
                return None
            kind = fields[0].decode("ascii", "replace")
            if kind == "D":
                try:
                    code = int(fields[1])
                except (IndexError, ValueError):
                    code = None
                return Marker("D", exit_code=code)
            if kind in ("A", "B", "C"):
                return Marker(kind)
            return None
        if body.startswith(b"7;file://"):
            # The rc prints $PWD raw (no percent-encoding): the path is everything from the
            # first slash after the host.
            rest = body[len(b"7;file://") :]
            slash = rest.find(b"/")
            return Marker("cwd", cwd=rest[slash:].decode("utf-8", "replace") if slash >= 0 else "/")
        return None


def _find_terminator(data: bytes, start: int) -> tuple[int, int]:
    """Index and length of the OSC terminator (BEL or ESC \\) at or after ``start``."""
    bel = data.find(b"\x07", start)
    st = data.find(b"\x1b\\", start)
    if bel < 0 and st < 0:
        return -1, 0
    if st < 0 or (0 <= bel < st):
        return bel, 1
    return st, 2
