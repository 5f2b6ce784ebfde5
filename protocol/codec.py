"""msgpack encoding with explicit limits for untrusted bytes (docs/protocol.md#envelope).

The guardian decodes whatever arrives on its socket, so every size the decoder could be asked
to allocate is capped before allocation, maps may only have string keys, and nesting depth is
bounded after decoding (msgpack's own recursion cap is far above what Tether ever sends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from tether.protocol import limits
from tether.protocol.errors import ErrorCode, TetherError


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """Upper bounds for one decoded frame (by default the wire's, from ``limits``)."""

    max_frame_bytes: int = limits.MAX_FRAME_BYTES
    max_str_len: int = limits.MAX_FRAME_STR_BYTES
    max_bin_len: int = limits.MAX_FRAME_BIN_BYTES
    max_array_len: int = limits.MAX_FRAME_ARRAY_LEN
    max_map_len: int = limits.MAX_FRAME_MAP_LEN
    max_depth: int = limits.MAX_FRAME_DEPTH


DEFAULT_LIMITS = DecodeLimits()


def encode(obj: Any) -> bytes:
    """Encode a message; bytes stay bytes and strings stay UTF-8 strings."""
    data: bytes = msgpack.packb(obj)  # msgpack >= 1.0: use_bin_type=True is the default
    return data


def decode(frame: bytes, limits: DecodeLimits = DEFAULT_LIMITS) -> Any:
    """Decode one untrusted frame, refusing anything over ``limits``.

    Raises :class:`TetherError` with ``invalid_request`` (malformed) or ``limit_exceeded``.
    """
    if len(frame) > limits.max_frame_bytes:
        raise TetherError(
            ErrorCode.LIMIT_EXCEEDED,
            f"frame of {len(frame)} bytes exceeds the {limits.max_frame_bytes}-byte limit",
        )
    try:
        obj = msgpack.unpackb(
            frame,
            raw=False,
            strict_map_key=True,
            max_str_len=limits.max_str_len,
            max_bin_len=limits.max_bin_len,
            max_array_len=limits.max_array_len,
            max_map_len=limits.max_map_len,
            max_ext_len=0,
        )
    except ValueError as exc:
        # msgpack reports both malformed input and exceeded limits as ValueError.
        code = ErrorCode.LIMIT_EXCEEDED if "exceeds" in str(exc) else ErrorCode.INVALID_REQUEST
        raise TetherError(code, f"undecodable frame: {exc}") from None
    except Exception as exc:  # ExtraData, FormatError, StackError, UnicodeDecodeError, ...
        raise TetherError(ErrorCode.INVALID_REQUEST, f"undecodable frame: {exc}") from None
    if len(frame.translate(None, _NOT_CONTAINER_HEADERS)) > limits.max_depth:
        _check_depth(obj, limits.max_depth)
    return obj


# Every map or array starts with one byte of these values (fixmap, fixarray, array 16/32,
# map 16/32; ext types are refused), so a frame with no more such bytes than the depth limit
# cannot nest deeper than it: counting them (in C) spares almost every frame the walk.
_CONTAINER_HEADERS = frozenset([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_NOT_CONTAINER_HEADERS = bytes(b for b in range(256) if b not in _CONTAINER_HEADERS)


def _check_depth(obj: Any, max_depth: int) -> None:
    """Refuse structures nested deeper than ``max_depth`` (level by level: no recursion).

    Only containers are visited (decoded msgpack holds exact dicts and lists). Runs only for
    a frame with more container headers than the limit (:func:`decode` counts them first).
    """
    level = [obj] if type(obj) in _CONTAINERS else []
    depth = 1
    while level:
        if depth > max_depth:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED, f"message nested deeper than {max_depth} levels"
            )
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            below += [child for child in children if type(child) in _CONTAINERS]
        level = below
        depth += 1


_CONTAINERS = (dict, list)
