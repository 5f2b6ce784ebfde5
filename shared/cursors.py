"""Opaque, signed cursors (docs/tools.md): bound to principal, workspace, thread, execution and
source. Any other use, and any edited byte, is ``invalid_cursor``.

A cursor is ``base64url(msgpack(payload)) + "." + base64url(hmac-sha256[:16])`` keyed by a
secret kept in the guardian's private state dir, so cursors survive guardian restarts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from pathlib import Path
from typing import Any

from tether.protocol import codec
from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.paths import write_private_file

_SECRET_BYTES = 32
_MAC_BYTES = 16


def load_secret(path: Path) -> bytes:
    """The signing secret at ``path``, created (0600) on first use."""
    try:
        data = path.read_bytes()
        if len(data) == _SECRET_BYTES:
            return data
    except FileNotFoundError:
        pass
    data = secrets.token_bytes(_SECRET_BYTES)
    write_private_file(path, data)
    return data


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    """The bytes of exactly what :func:`_b64` writes; anything else raises ``ValueError``.

    The lenient decoder skips characters outside the alphabet and ignores stray padding and
    unused low bits, so an edited cursor ("!!" inserted, "=" appended) decoded to the same
    bytes and passed its MAC.
    """
    data = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    if _b64(data) != text:
        raise ValueError("not the canonical encoding of its bytes")
    return data


class CursorSigner:
    """Signs and verifies cursors for one scope."""

    def __init__(self, secret: bytes) -> None:
        # Keyed once: each MAC copies it instead of deriving the key pads again (the guardian
        # has no OpenSSL, so that was pure Python, once per observe item).
        self._keyed = hmac.new(secret, digestmod=hashlib.sha256)

    def _mac(self, body: bytes) -> bytes:
        mac = self._keyed.copy()
        mac.update(body)
        return mac.digest()[:_MAC_BYTES]

    def sign(self, scope: dict[str, str], state: dict[str, Any]) -> str:
        """A cursor carrying ``state``, valid only for exactly ``scope``."""
        body = codec.encode({"scope": scope, "state": state})
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def verify(self, cursor: str, scope: dict[str, str]) -> dict[str, Any]:
        """The state of a cursor issued for ``scope``; ``invalid_cursor`` otherwise."""
        invalid = TetherError(
            ErrorCode.INVALID_CURSOR,
            "cursor is not valid here (edited, or issued for another execution, source, "
            "thread or workspace); start again without a cursor",
            {"input_sent": False},
        )
        try:
            body_text, mac_text = cursor.split(".", 1)
            body, mac = _unb64(body_text), _unb64(mac_text)
        except (ValueError, binascii.Error):
            raise invalid from None
        if not hmac.compare_digest(mac, self._mac(body)):
            raise invalid
        try:
            payload = codec.decode(body)
        except TetherError:
            raise invalid from None
        if not isinstance(payload, dict) or payload.get("scope") != scope:
            raise invalid
        state = payload.get("state")
        if not isinstance(state, dict):
            raise invalid
        return state
