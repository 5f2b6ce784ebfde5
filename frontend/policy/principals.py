"""The principals file of ``tether serve --http`` (docs/security.md#principals): who may connect, with which
token.

A TOML file, private to its owner like every Tether file (0600, owned by the user running
the server: docs/security.md#state-and-runtime-directories), with one ``[[principal]]`` table per principal::

    [[principal]]
    id = "alice"                  # becomes the principal key http:alice
    token_sha256 = "<64 hex>"     # or token = "<at least 32 bytes>"
    profile = "full"              # full | coding | terminal | read-only
    allow_tools = ["Execution", "Agent"]   # optional: exactly these tools (+ Initialize)
    workspaces = ["/home/alice/src"]       # optional: canonical roots it may use

Anything else (an unknown key, a short token, a duplicate id or token, a file others can
read) is refused at start with a message naming the rule. Tokens are kept only as SHA-256
digests in memory and are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tether.frontend.policy.authority import Caller, tools_for
from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.ssh_target import RemoteWorkspace, is_remote

MIN_TOKEN_BYTES = 32
MAX_FILE_BYTES = 256 * 1024
MAX_PRINCIPALS = 1024
_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_KEYS = frozenset({"id", "token", "token_sha256", "profile", "allow_tools", "workspaces"})


@dataclass(frozen=True, slots=True)
class Principal:
    """One configured principal: its id, the digest of its token, and its authority."""

    id: str
    token_sha256: bytes
    caller: Caller


class Principals:
    """The principals of one server, looked up by bearer token."""

    def __init__(self, principals: list[Principal]) -> None:
        self._all = principals

    def __len__(self) -> int:
        return len(self._all)

    def callers(self) -> dict[str, Caller]:
        """Each principal's authority, by principal id."""
        return {principal.id: principal.caller for principal in self._all}

    def by_token(self, token: str) -> Principal | None:
        """The principal whose token this is, compared in constant time, or None."""
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for principal in self._all:  # no early exit: timing says nothing about which one
            if hmac.compare_digest(digest, principal.token_sha256):
                found = principal
        return found


def load_principals(path: Path) -> Principals:
    """Read and check a principals file; ``config_invalid`` naming the rule otherwise."""
    data = _read_private(path)
    unknown = set(data) - {"principal"}
    if unknown:
        _refuse(path, f"unknown top-level keys {sorted(unknown)}; only [[principal]] tables")
    tables = data.get("principal")
    if not isinstance(tables, list) or not tables:
        _refuse(path, "no [[principal]] table; add at least one")
    if len(tables) > MAX_PRINCIPALS:
        _refuse(path, f"more than {MAX_PRINCIPALS} principals")
    principals: list[Principal] = []
    seen_ids: set[str] = set()
    seen_tokens: set[bytes] = set()
    for index, table in enumerate(tables, start=1):
        principal = _principal(path, index, table)
        if principal.id in seen_ids:
            _refuse(path, f"principal #{index}: id {principal.id!r} is used twice")
        if principal.token_sha256 in seen_tokens:
            _refuse(path, f"principal #{index} ({principal.id}): its token is another "
                          "principal's token; each principal needs its own")
        seen_ids.add(principal.id)
        seen_tokens.add(principal.token_sha256)
        principals.append(principal)
    return Principals(principals)


def _read_private(path: Path) -> dict[str, Any]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        _refuse(path, f"cannot open it: {exc.strerror}")
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            _refuse(path, "it is not a regular file")
        if st.st_uid != os.getuid():
            _refuse(path, f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
                          "it holds tokens, so only its owner may run a server from it")
        if st.st_mode & 0o077:
            _refuse(path, f"it has mode {stat.S_IMODE(st.st_mode):04o}; a file holding tokens "
                          f"must be private: chmod 600 {path}")
        raw = fh.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        _refuse(path, f"it is larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        return tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        _refuse(path, f"it is not valid TOML: {exc}")


def _principal(path: Path, index: int, table: Any) -> Principal:
    where = f"principal #{index}"
    if not isinstance(table, dict):
        _refuse(path, f"{where} is not a table")
    unknown = set(table) - _KEYS
    if unknown:
        _refuse(path, f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(_KEYS)}")
    ident = table.get("id")
    if not isinstance(ident, str) or not _ID.match(ident):
        _refuse(path, f"{where}: id must be 1-64 characters of A-Z a-z 0-9 . _ -")
    where = f"principal #{index} ({ident})"
    token, hashed = table.get("token"), table.get("token_sha256")
    if (token is None) == (hashed is None):
        _refuse(path, f"{where}: give exactly one of token or token_sha256")
    if token is not None:
        if not isinstance(token, str) or len(token.encode()) < MIN_TOKEN_BYTES:
            _refuse(path, f"{where}: token must be at least {MIN_TOKEN_BYTES} bytes "
                          "(for example: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        digest = hashlib.sha256(token.encode()).digest()
    else:
        if not isinstance(hashed, str) or not _HEX64.match(hashed):
            _refuse(path, f"{where}: token_sha256 must be 64 lowercase hex digits")
        digest = bytes.fromhex(hashed)
    profile = table.get("profile")
    if not isinstance(profile, str):
        _refuse(path, f"{where}: profile is required (full, coding, terminal or read-only)")
    allow_tools = table.get("allow_tools")
    if allow_tools is not None and not (
        isinstance(allow_tools, list) and all(isinstance(t, str) for t in allow_tools)
    ):
        _refuse(path, f"{where}: allow_tools must be a list of tool names")
    try:
        tools = tools_for(profile, allow_tools)
    except ValueError as exc:
        _refuse(path, f"{where}: {exc}")
    workspaces = table.get("workspaces")
    roots: tuple[str, ...] | None = None
    if workspaces is not None:
        if not isinstance(workspaces, list) or not all(isinstance(w, str) for w in workspaces):
            _refuse(path, f"{where}: workspaces must be a list of absolute paths")
        roots = tuple(_root(path, where, w) for w in workspaces)
    caller = Caller(principal=f"http:{ident}", profile=profile, tools=tools, workspaces=roots)
    return Principal(id=ident, token_sha256=digest, caller=caller)


def _root(path: Path, where: str, workspace: str) -> str:
    if is_remote(workspace):  # a workspace (or prefix) on another host: docs/hosts.md
        try:
            return RemoteWorkspace.parse(workspace).url
        except TetherError as err:
            _refuse(path, f"{where}: workspace {workspace!r}: {err.message}")
    real = os.path.realpath(workspace)
    if not os.path.isabs(workspace) or not os.path.isdir(real):
        _refuse(path, f"{where}: workspace {workspace!r} is not an absolute path to a directory")
    return real


def _refuse(path: Path, rule: str) -> NoReturn:
    raise TetherError(ErrorCode.CONFIG_INVALID, f"principals file {path}: {rule}")
