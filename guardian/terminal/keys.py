"""Named keys for ``send_keys``: what each one types into a terminal."""

from __future__ import annotations

from tether.protocol.errors import ErrorCode, TetherError

_KEYS: dict[str, bytes] = {
    "Enter": b"\r",
    "Escape": b"\x1b",
    "Tab": b"\t",
    "Backspace": b"\x7f",
    "Space": b" ",
    "Up": b"\x1b[A",
    "Down": b"\x1b[B",
    "Right": b"\x1b[C",
    "Left": b"\x1b[D",
    "Home": b"\x1b[H",
    "End": b"\x1b[F",
    "PageUp": b"\x1b[5~",
    "PageDown": b"\x1b[6~",
    "Delete": b"\x1b[3~",
    "Insert": b"\x1b[2~",
}
for _n in range(1, 13):
    _KEYS[f"F{_n}"] = {
        1: b"\x1bOP", 2: b"\x1bOQ", 3: b"\x1bOR", 4: b"\x1bOS", 5: b"\x1b[15~", 6: b"\x1b[17~",
        7: b"\x1b[18~", 8: b"\x1b[19~", 9: b"\x1b[20~", 10: b"\x1b[21~", 11: b"\x1b[23~",
        12: b"\x1b[24~",
    }[_n]


def key_bytes(name: str) -> bytes:
    """Bytes for one key name: a named key, ``Ctrl-<letter>``, ``Ctrl-[\\]^_@``, or one
    printable character, typed as itself (``q`` for a pager, ``y`` for a question)."""
    if name in _KEYS:
        return _KEYS[name]
    if len(name) == 1 and name.isprintable():
        return name.encode()
    lowered = name.lower()
    if lowered.startswith(("ctrl-", "ctrl+", "c-")):
        char = name.split("-", 1)[-1].split("+", 1)[-1]
        if len(char) == 1:
            code = ord(char.upper())
            if 64 <= code <= 95:
                return bytes([code - 64])
    raise TetherError(
        ErrorCode.INVALID_KEY,
        f"unknown key {name!r}; use one of {', '.join(sorted(_KEYS))}, "
        "Ctrl-<letter>, Ctrl-[ \\ ] ^ _ @ (Ctrl-\\ sends SIGQUIT) or one printable "
        "character (send longer text with send_text); nothing was typed",
        {"input_sent": False},
    )


def keys_bytes(names: list[str]) -> bytes:
    """All keys of a ``send_keys`` request; validates every name before anything is typed."""
    return b"".join(key_bytes(name) for name in names)


def known_keys() -> list[str]:
    return sorted(_KEYS)
