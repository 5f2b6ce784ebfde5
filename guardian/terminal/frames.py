"""Where a chunk of terminal output begins new frames.

A program that redraws its whole screen (an agent's TUI) begins each redraw with the same
few bytes: a synchronized update's start (``CSI ? 2026 h``, which Codex and OpenCode write)
or a hidden cursor (``CSI ? 25 l``, which most redraws begin with, Codex's, OpenCode's and the
scripted fake agent's among them). A loaded machine may read two frames, a short turn's busy
frame and the idle one after it, in one chunk; the turn watch looks at the screen between
the pieces this module cuts, so the first frame is seen although no read ended after it
(docs/architecture.md#the-turn-watch).

Cutting is exact: feeding the pieces one after another draws what feeding the chunk does.

A program that marks no frame start cannot be cut: :data:`FRAME_MARK_ENV` asks the ones that
can be told to (every process Tether starts gets it).
"""

from __future__ import annotations

#: Bytes a redraw begins with.
FRAME_STARTS = (b"\x1b[?2026h", b"\x1b[?25l")
#: Variables that make a program begin each redraw with a frame start. Claude Code wraps its
#: redraws in synchronized updates only for terminals it knows by name (``TERM``), unless
#: this is set; Codex and OpenCode always do.
FRAME_MARK_ENV = {"CLAUDE_CODE_FORCE_SYNC_OUTPUT": "1"}
#: Most pieces one chunk is cut into (the last ones: the frames nobody will see otherwise
#: are the ones before the chunk's last); a chunk of many tiny frames is cut no finer.
MAX_PIECES = 8
#: Fewer bytes than this after a cut are no frame of their own (``CSI ? 2026 h`` then
#: ``CSI ? 25 l`` begin one redraw).
MIN_PIECE = 16


def frame_pieces(data: bytes) -> list[bytes]:
    """``data`` cut before each frame start after its first byte (at most
    :data:`MAX_PIECES` pieces, the cuts nearest the end kept)."""
    cuts: list[int] = []
    for marker in FRAME_STARTS:
        at = data.find(marker, 1)
        while at != -1:
            cuts.append(at)
            at = data.find(marker, at + len(marker))
    if not cuts:
        return [data]
    kept: list[int] = []
    for cut in sorted(cuts):  # a frame start right after another is the same frame's
        if not kept or cut - kept[-1] >= MIN_PIECE:
            kept.append(cut)
    cuts = kept[-(MAX_PIECES - 1):]
    pieces = []
    start = 0
    for cut in cuts:
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    return pieces
