"""Text that Tether refuses rather than alters (docs/security.md#local-permissions-and-limits: refused whole,
nothing half-done).

A command or text that holds a NUL byte, a lone UTF-16 surrogate (``"\\ud800"`` in JSON) or
bytes that are not UTF-8 cannot be typed as given: a terminal or ``bash`` would silently drop
or replace those characters, so what runs would differ from what was asked. Such input is
refused with ``invalid_request`` naming the field and the character offset. Raw control bytes
can still be typed deliberately with ``send_keys`` (``Ctrl-@`` is NUL).

Invalid UTF-8 reaches this check as lone surrogates: the front-end's stdio reader decodes
with ``surrogateescape`` so that bad bytes are kept (as U+DC80-U+DCFF), never replaced.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")

#: The pydantic error type the front-end recognises to report ``field`` and ``offset``.
UNSAFE_TEXT_ERROR = "unsafe_text"


def unsafe_char(value: str) -> tuple[int, str] | None:
    """``(character offset, description)`` of the first character Tether refuses, or None."""
    match = _UNSAFE.search(value)
    if match is None:
        return None
    char = match.group()
    if char == "\x00":
        return match.start(), "a NUL byte (U+0000)"
    return match.start(), f"invalid UTF-8 or a lone surrogate (U+{ord(char):04X})"


def unsafe_text_message(what: str, offset: int) -> str:
    """The sentence every refusal of unsafe text uses."""
    return (f"holds {what} at character offset {offset}; it would not reach the terminal as "
            "given, so nothing was sent. Remove it, or type control bytes with send_keys "
            "(Ctrl-@ is NUL)")


def refuse_unsafe_text(value: str) -> str:
    """Pydantic validator: pass clean text through unchanged, refuse anything else."""
    found = unsafe_char(value)
    if found is not None:
        offset, what = found
        raise PydanticCustomError(
            UNSAFE_TEXT_ERROR, "{message}",
            {"message": unsafe_text_message(what, offset), "offset": offset},
        )
    return value


def first_surrogate(value: Any) -> tuple[tuple[str | int, ...], int] | None:
    """Walk decoded JSON: the path and character offset of the first string (or key) holding
    a lone surrogate, or None. Iterative, so deep nesting cannot exhaust the stack."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            match = _SURROGATE.search(item)
            if match is not None:
                return where, match.start()
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                match = _SURROGATE.search(str(key))
                if match is not None:
                    return (*where, str(key)), match.start()
                stack.append(((*where, str(key)), child))
        elif isinstance(item, list):
            stack.extend(((*where, i), child) for i, child in reversed(list(enumerate(item))))
    return None


#: A string field that must reach the terminal exactly as given.
CleanText = Annotated[str, AfterValidator(refuse_unsafe_text)]
