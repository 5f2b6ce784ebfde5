"""Request and response envelopes (docs/protocol.md#envelope,
docs/protocol.md#deadlines-and-the-guardian-instance).

request  ``{v: [major, minor], id, method, params, deadline_unix_ms, guardian_instance_id?, auth}``
response ``{v, id, ok: true, result}`` or ``{v, id, ok: false, error: {code, message, data}}``

Unknown keys are ignored on both sides so either side can grow without breaking the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.versions import Version

MAX_ID_LEN = 64
MAX_METHOD_LEN = 64


@dataclass(slots=True)
class Request:
    """A decoded, shape-checked request. (Not frozen: a frozen dataclass is built through
    object.__setattr__ field by field, which cost every request a few µs; nothing changes
    a request after it is parsed.)"""

    version: Version
    id: str
    method: str
    params: dict[str, Any]
    deadline_unix_ms: int
    guardian_instance_id: str | None
    auth: str

    def to_wire(self) -> dict[str, Any]:
        """The envelope map to encode."""
        wire: dict[str, Any] = {
            "v": [self.version.major, self.version.minor],
            "id": self.id,
            "method": self.method,
            "params": self.params,
            "deadline_unix_ms": self.deadline_unix_ms,
            "auth": self.auth,
        }
        if self.guardian_instance_id is not None:
            wire["guardian_instance_id"] = self.guardian_instance_id
        return wire


def request_id_of(obj: Any) -> str | None:
    """Best-effort request id from an envelope that failed validation (for the error reply)."""
    if isinstance(obj, dict):
        rid = obj.get("id")
        if isinstance(rid, str) and 0 < len(rid) <= MAX_ID_LEN:
            return rid
    return None


def parse_request(obj: Any) -> Request:
    """Validate an envelope's shape; raises ``invalid_request`` naming the bad field."""
    if not isinstance(obj, dict):
        raise TetherError(ErrorCode.INVALID_REQUEST, "request envelope must be a map")
    v = obj.get("v")
    if not (  # every request passes here: plain checks, no generator
        type(v) is list and len(v) == 2 and isinstance(v[0], int) and isinstance(v[1], int)
        and v[0] >= 0 and v[1] >= 0
    ):
        raise TetherError(ErrorCode.INVALID_REQUEST, "envelope field v must be [major, minor]")
    rid = obj.get("id")
    if not isinstance(rid, str) or not 0 < len(rid) <= MAX_ID_LEN:
        raise TetherError(
            ErrorCode.INVALID_REQUEST, f"envelope field id must be a string of 1-{MAX_ID_LEN} chars"
        )
    method = obj.get("method")
    if not isinstance(method, str) or not 0 < len(method) <= MAX_METHOD_LEN:
        raise TetherError(ErrorCode.INVALID_REQUEST, "envelope field method must be a short string")
    params = obj.get("params", {})
    if not isinstance(params, dict):
        raise TetherError(ErrorCode.INVALID_REQUEST, "envelope field params must be a map")
    deadline = obj.get("deadline_unix_ms")
    if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0:
        raise TetherError(
            ErrorCode.INVALID_REQUEST, "envelope field deadline_unix_ms must be a positive integer"
        )
    instance = obj.get("guardian_instance_id")
    if instance is not None and not isinstance(instance, str):
        raise TetherError(ErrorCode.INVALID_REQUEST, "guardian_instance_id must be a string")
    auth = obj.get("auth")
    if not isinstance(auth, str):
        raise TetherError(ErrorCode.UNAUTHORIZED, "request carries no auth token")
    return Request(
        version=Version(v[0], v[1]),
        id=rid,
        method=method,
        params=params,
        deadline_unix_ms=deadline,
        guardian_instance_id=instance,
        auth=auth,
    )


def ok_response(version: Version, rid: str, result: Any) -> dict[str, Any]:
    """A success envelope."""
    return {"v": [version.major, version.minor], "id": rid, "ok": True, "result": result}


def error_response(version: Version, rid: str | None, error: TetherError) -> dict[str, Any]:
    """An error envelope (``id`` is empty when the request's id could not be read)."""
    return {
        "v": [version.major, version.minor],
        "id": rid or "",
        "ok": False,
        "error": error.to_wire(),
    }


@dataclass(frozen=True, slots=True)
class Response:
    """A decoded response: either ``result`` or ``error``."""

    id: str
    ok: bool
    result: Any
    error: TetherError | None


def parse_response(obj: Any) -> Response:
    """Validate a response envelope from a guardian."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise TetherError(ErrorCode.INVALID_REQUEST, "malformed response envelope")
    if obj.get("ok") is True:
        return Response(obj["id"], True, obj.get("result"), None)
    return Response(obj["id"], False, None, TetherError.from_wire(obj.get("error")))
