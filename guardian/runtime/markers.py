"""Shell-integration markers: the rc file Tether starts bash with, and the marker scanner.

The rc file sources the user's own rc (dotfiles are never modified), then installs OSC 133
markers: ``C`` when a command line starts running (from ``PS0``), ``D;<exit>`` when it
finishes and ``A`` once per prompt cycle (both from ``PROMPT_COMMAND``). Every marker
carries a per-shell nonce (``aid=``) so output that merely contains OSC 133 (a nested shell,
``cat`` of a recording) is ordinary output.

Commands change these variables (a sourced rc file assigns ``PROMPT_COMMAND``, a prompt hook
puts itself in front of it, ``PS0=''``), and a lost marker would leave the thread's shell
busy for good, or report another command's exit status. So the hook that marks the end is
the last element of ``PROMPT_COMMAND`` (an array from bash 5.1; bash gives every element the
command line's status), which a plain assignment does not touch (what the user's own
``PROMPT_COMMAND`` prints comes before it, as part of the command's output); every prompt
puts ``PS0``'s part back; and D and A are written to the terminal bash keeps for job control
(fd 255), not to stdout, which a command may send elsewhere (``exec >log``). Before bash
5.1 the hook goes first in the ``PROMPT_COMMAND`` string, as it did before.
``C`` comes from ``PS0``, which bash prints to its stderr: after ``exec 2>/dev/null`` a
command's D comes without its C, and the shell (``shell.py``) ends it all the same, with an
event saying its output could not be captured. Replacing the
whole array (``PROMPT_COMMAND=(...)``, ``unset``) or ``exec bash`` still loses the markers:
the command then shows as running (``Initialize reset_shell`` gives a fresh shell).

The nonce is kept from child processes: the rc file deletes itself before anything else
runs, the nonce lives in a shell variable that is never exported, and neither ``PS0`` nor
``PS1`` contains it (they name variables). What runs *inside* the shell process (a sourced
script, ``set``, ``declare -p``) can still read it: the nonce only keeps accidents out. A
forged marker is defeated by the kernel check in ``shell.py`` (see ``kernel.py``), not by
the nonce. The working directory is read from ``/proc``, never from the output.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

RC_TEMPLATE = r"""# Tether shell integration (generated; your own rc files are sourced, never changed).
# bash has read this whole file already: delete it before anything else can read it.
@FORGET_RC@
__tether_nonce=@NONCE@
__tether_c=$'\e]133;C;aid='"$__tether_nonce"$'\a'
if [ -f /etc/bash.bashrc ]; then . /etc/bash.bashrc; fi
if [ -f "$HOME/.bashrc" ]; then . "$HOME/.bashrc"; fi
# Never exported, even if an rc file turned on allexport.
export -n __tether_nonce __tether_c
# Tether types ` . <command file>`; keep those lines out of the user's history.
HISTCONTROL="ignorespace${HISTCONTROL:+:$HISTCONTROL}"
__tether_cmd=0
# Markers go to the terminal itself, not to stdout, which a command may send elsewhere
# (exec >log): fd 255, the copy of the terminal bash keeps for job control, when it has one.
if { true >&255; } 2>/dev/null; then __tether_fd=255; else __tether_fd=1; fi
# The end of a command line (D, with its status: $1) and a new prompt cycle (A), in one
# printf: one write, so they reach Tether in one read instead of two.
__tether_marks() {
  if [[ $__tether_cmd == 1 ]]; then
    __tether_cmd=0
    printf '\e]133;D;%s;aid=%s\a\e]133;A;aid=%s\a' "$1" "$__tether_nonce" "$__tether_nonce" >&$__tether_fd
  else
    printf '\e]133;A;aid=%s\a' "$__tether_nonce" >&$__tether_fd
  fi
  # The next command line's C comes from PS0: put it back if a command dropped it (PS0='').
  [[ $PS0 == *"$__tether_ps0"* ]] || PS0=$PS0$__tether_ps0
}
# With stderr closed: after set -x the hook (and the nonce) is not traced into the next
# command's output. From bash 5.1 PROMPT_COMMAND may be an array, whose every element bash
# runs with the command line's status in $?: the hook is its last element, which commands
# that assign PROMPT_COMMAND (a sourced rc file) or put a hook in front of it
# (PROMPT_COMMAND="hook;$PROMPT_COMMAND") do not touch. Before 5.1 it goes first in the
# string.
if (( BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1) )); then
  PROMPT_COMMAND[65535]='{ __tether_marks $?; } 2>&-'
  # Element 0 set (empty if the user's rc left it so): "$PROMPT_COMMAND" is element 0, and
  # hooks that prepend themselves read it under set -u.
  PROMPT_COMMAND[0]=${PROMPT_COMMAND[0]-}
else
  PROMPT_COMMAND="{ __tether_marks \$?; } 2>&-${PROMPT_COMMAND:+;$PROMPT_COMMAND}"
fi
# PS0 is expanded just before a command line runs: print C (named, not spelled out), and set
# the flag through an arithmetic side effect inside an empty substring expansion. After the
# user's own PS0, whose text is then not part of the command's output.
__tether_ps0='${__tether_c}${__tether_cmd:0:$((__tether_cmd=1,0))}'
PS0="${PS0:-}$__tether_ps0"
"""


def rc_text(nonce: str, path: str, *, handed_fd: int | None = None) -> str:
    """The rc file, at ``path``, for a shell whose markers carry ``nonce``. ``handed_fd``:
    the file was unlinked already and handed to bash as ``/dev/fd/N`` (a sandboxed shell,
    which may not delete it): close that instead."""
    forget = (f"exec {handed_fd}<&-" if handed_fd is not None
              else f"command rm -f -- {shlex.quote(path)}")
    return RC_TEMPLATE.replace("@NONCE@", nonce).replace("@FORGET_RC@", forget)


@dataclass(frozen=True, slots=True)
class Marker:
    """One recognised marker: ``kind`` is ``A``, ``C`` or ``D``."""

    kind: str
    exit_code: int | None = None


#: The longest escape sequence we hold back waiting for its end before giving up on it.
_MAX_MARKER = 8192
_OSC = b"\x1b]"
#: What ends an OSC string: BEL, CAN, SUB or ESC (ST is ESC \\; any other ESC aborts it).
_STRING_END = re.compile(rb"[\x07\x18\x1a\x1b]")


class MarkerScanner:
    """Splits PTY output into plain byte runs and markers, across chunk boundaries.

    The common chunk has no OSC at all and costs one ``bytes.find``.
    """

    def __init__(self, nonce: str, carry: bytes = b"") -> None:
        self._tag = f"aid={nonce}".encode()
        #: The end of the last chunk that may begin a marker (handed over by a live upgrade).
        self._carry = carry

    @property
    def carry(self) -> bytes:
        return self._carry

    def feed(self, data: bytes) -> Iterator[bytes | Marker]:
        """Yield byte runs and markers in stream order."""
        if self._carry:
            data = self._carry + data
            self._carry = b""
        pos = 0
        while True:
            start = data.find(_OSC, pos)
            if start < 0:
                yield from self._rest(data, pos)
                return
            end, term_len = _find_terminator(data, start + 2)
            if term_len == 0 and end >= 0:
                # Aborted by another sequence before any terminator (a title printed without
                # its BEL): ordinary output, and the ESC that aborted it starts the next
                # token, which may well be the shell's own marker.
                yield data[pos:end]
                pos = end
                continue
            if end < 0:
                if len(data) - start < _MAX_MARKER:
                    if start > pos:
                        yield data[pos:start]
                    self._carry = data[start:]
                    return
                # Unterminated and huge: not one of ours; pass it through.
                yield from self._rest(data, pos)
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

    def _rest(self, data: bytes, pos: int) -> Iterator[bytes]:
        """``data[pos:]`` as output, but for an ESC that ends it: a read may end between a
        marker's ESC and its "]", so that ESC waits for the next read."""
        stop = len(data) - 1 if data.endswith(b"\x1b") else len(data)
        if pos < stop:
            yield data[pos:stop] if pos or stop < len(data) else data
        self._carry = data[stop:]

    def _parse(self, body: bytes) -> Marker | None:
        if not body.startswith(b"133;"):
            return None  # OSC 7 (cwd) and the rest are ordinary output: cwd comes from /proc
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


def _find_terminator(data: bytes, start: int) -> tuple[int, int]:
    """Where the OSC string that starts at ``start`` ends: ``(index, length)`` of its
    terminator (BEL, or ESC \\); ``(index, 0)`` when CAN, SUB or an ESC that starts another
    sequence aborts it there, as in a terminal's own parser (an ESC inside a string always
    ends it); ``(-1, 0)`` when ``data`` ends first (or with an ESC whose next byte decides)."""
    found = _STRING_END.search(data, start)
    if found is None:
        return -1, 0
    at = found.start()
    byte = data[at]
    if byte == 0x07:
        return at, 1
    if byte != 0x1B:
        return at, 0  # CAN or SUB
    if at + 1 == len(data):
        return -1, 0
    return (at, 2) if data[at + 1] == 0x5C else (at, 0)
