"""``ssh://[user@]host[:port]/absolute/path`` workspaces (docs/hosts.md#remote-workspaces).

A remote workspace names a host as the user's OpenSSH configuration knows it (an alias,
with its ProxyJump and identity files) and an absolute path on that host. Parsing checks
only what can be checked here: the path is made canonical by the host itself (symlinks
resolve there), and this module only normalises it lexically, so that ``/a/./b/`` and
``/a/b`` are one workspace key on this side.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_PATH

SCHEME = "ssh://"

#: A host as ssh takes it: a name from the user's configuration or DNS, or an address. Never
#: starting with ``-`` (it would be read as an option), no spaces, quotes or shell syntax.
_HOST = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.%-]{0,252}|\[[0-9A-Fa-f:.]{2,45}\]")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def is_remote(workspace_root: str) -> bool:
    """Whether ``workspace_root`` names a workspace on another host."""
    return workspace_root.startswith(SCHEME)


@dataclass(frozen=True, slots=True)
class SshHost:
    """One host as ssh is asked to reach it: the same ``user``, ``host`` and ``port`` share
    one master connection."""

    host: str
    user: str | None = None
    port: int | None = None

    @property
    def name(self) -> str:
        """``[user@]host[:port]``, as a person reads it and as ``--host`` takes it."""
        who = f"{self.user}@" if self.user else ""
        where = f":{self.port}" if self.port else ""
        return f"{who}{self.host}{where}"

    @property
    def key(self) -> str:
        """A short stable name for files of this host (its control socket, its forwards)."""
        return hashlib.sha256(self.name.encode()).hexdigest()[:16]

    def destination(self) -> list[str]:
        """ssh's arguments naming this host: ``-l``/``-p`` as given, then the host (checked
        never to start with ``-``, so never read as an option)."""
        argv: list[str] = []
        if self.user:
            argv += ["-l", self.user]
        if self.port:
            argv += ["-p", str(self.port)]
        host = self.host[1:-1] if self.host.startswith("[") else self.host
        return [*argv, host]

    @classmethod
    def parse(cls, text: str) -> SshHost:
        """``[user@]host[:port]`` (what ``--host`` takes), or ``invalid_request``."""
        user: str | None = None
        rest = text
        if "@" in rest:
            user, rest = rest.rsplit("@", 1)
            if not _USER.fullmatch(user):
                raise _invalid(text, f"the user {user!r} is not a user name")
        port: int | None = None
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                raise _invalid(text, "an IPv6 address needs its closing ]")
            host, tail = rest[:end + 1], rest[end + 1:]
            if tail:
                if not tail.startswith(":"):
                    raise _invalid(text, "only :port may follow the host")
                port = _port(text, tail[1:])
        elif ":" in rest:
            host, raw = rest.rsplit(":", 1)
            port = _port(text, raw)
        else:
            host = rest
        if not _HOST.fullmatch(host):
            raise _invalid(text, f"{host!r} is not a host name (letters, digits, '.', '-', "
                           "'_'; never starting with '-')")
        return cls(host=host, user=user, port=port)


@dataclass(frozen=True, slots=True)
class RemoteWorkspace:
    """A workspace on another host: the host, and the absolute path there."""

    host: SshHost
    path: str

    @property
    def url(self) -> str:
        """The canonical ``ssh://`` form: what Initialize returns and calls present."""
        return f"{SCHEME}{self.host.name}{self.path}"

    @classmethod
    def parse(cls, text: str) -> RemoteWorkspace:
        """An ``ssh://[user@]host[:port]/absolute/path`` workspace, or ``invalid_request``
        naming what is wrong with it."""
        if not is_remote(text):
            raise _invalid(text, f"it does not start with {SCHEME}")
        rest = text[len(SCHEME):]
        slash = rest.find("/")
        if slash <= 0:
            raise _invalid(text, "it needs a host and an absolute path: "
                           "ssh://[user@]host[:port]/absolute/path")
        host = SshHost.parse(rest[:slash])
        raw_path = rest[slash:]
        if len(raw_path.encode()) > MAX_PATH:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"the path of workspace_root is {len(raw_path.encode())} bytes; the limit is "
                f"{MAX_PATH} bytes (PATH_MAX). Nothing was started.",
                {"input_sent": False, "field": "workspace_root", "limit": MAX_PATH})
        if any(ch in raw_path for ch in "\0\n\r"):
            raise _invalid(text, "the path holds a NUL or line break")
        path = posixpath.normpath(raw_path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        return cls(host=host, path=path)


def _port(text: str, raw: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise _invalid(text, f"the port {raw!r} is not a number from 1 to 65535")
    return int(raw)


def _invalid(text: str, why: str) -> TetherError:
    return TetherError(ErrorCode.INVALID_REQUEST,
                       f"workspace_root/host {text[:200]!r} is not ssh://[user@]host[:port]"
                       f"/absolute/path: {why}. Nothing was started.", {"input_sent": False})
