"""State and runtime directories, with the permission and owner checks of
docs/security.md#state-and-runtime-directories.

A guardian is keyed by ``(principal, canonical workspace_root)`` (docs/protocol.md#guardians-one-per-key);
its socket, lock and
``guardian.json`` live in a private per-key directory under the runtime dir, its catalog,
journals and log under the state dir.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_PATH
from tether.shared.config import Config

#: sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_IPC_PATH_BYTES = 107


#: Characters of an over-long value that a message shows (never the whole value).
PREVIEW_CHARS = 60


def canonical_workspace(path: str) -> str:
    """The canonical form of a workspace root: absolute, symlinks resolved, must be a dir.

    Its length is checked first, in bytes as the kernel counts a path (PATH_MAX): a longer one
    is no directory this system can open, and is refused as over the limit, not as missing."""
    _check_path_size(path, "workspace_root")
    if not path or not os.path.isabs(path):
        raise TetherError(
            ErrorCode.INVALID_REQUEST, f"workspace_root must be an absolute path, got {path!r}"
        )
    real = os.path.realpath(path)
    _check_path_size(real, "workspace_root (with symlinks resolved)")
    if not os.path.isdir(real):
        raise TetherError(ErrorCode.INVALID_REQUEST, f"workspace_root {path!r} is not a directory")
    return real


def _check_path_size(path: str, what: str) -> None:
    size = len(os.fsencode(path))
    if size > MAX_PATH:
        raise TetherError(
            ErrorCode.LIMIT_EXCEEDED,
            f"{what} is {size} bytes; the limit is {MAX_PATH} bytes (PATH_MAX). It begins "
            f"{path[:PREVIEW_CHARS]!r}... Nothing was started. Use a workspace with a "
            "shorter path.",
            {"input_sent": False, "field": "workspace_root", "limit": MAX_PATH, "size": size},
        )


def refuse_broad_workspace(root: str, config: Config) -> str:
    """Refuse a canonical workspace that is too broad to be one: ``/``, the home directory,
    or a directory that contains it, unless the operator allowed that root
    (TETHER_ALLOW_BROAD_WORKSPACES). A guardian for ``/`` would serve the whole filesystem."""
    home = _real_home(config.home)
    broad = root == os.sep or root == home or home.startswith(root.rstrip(os.sep) + os.sep)
    if broad and root not in config.broad_workspaces_allowed:
        what = "the filesystem root" if root == os.sep else (
            "your home directory" if root == home else f"an ancestor of your home directory {home}")
        raise TetherError(
            ErrorCode.WORKSPACE_TOO_BROAD,
            f"workspace_root {root!r} is {what}, too broad to be a workspace; nothing was "
            "started. Use a project directory, or ask the operator to allow it with "
            f"TETHER_ALLOW_BROAD_WORKSPACES={root}",
            {"workspace_root": root, "input_sent": False, "operator_action_required": True},
        )
    return root


@functools.lru_cache(maxsize=8)
def _real_home(home: str) -> str:
    # Asked on every tool call; a home directory's real path does not move under a process.
    return os.path.realpath(home)


def guardian_key(principal: str, workspace_root: str) -> str:
    """A short stable key for ``(principal, canonical workspace)``."""
    digest = hashlib.sha256(f"{principal}\0{workspace_root}".encode()).hexdigest()
    return digest[:20]


def ensure_private_dir(path: Path, *, what: str, repair: bool = False) -> Path:
    """Create ``path`` (0700) if missing; refuse it if another user owns it or group/other
    can reach it, as tmux does for its socket directory. ``repair``: a directory Tether itself
    creates inside a checked root, which older versions left 0755, is tightened to 0700."""
    try:
        # Missing ancestors are created 0700 too (mkdir -p would make them 0755,
        # docs/security.md#local-permissions-and-limits).
        for level in reversed([path, *path.parents]):
            if not level.exists():
                level.mkdir(mode=0o700, exist_ok=True)
                os.chmod(level, 0o700)  # mkdir's mode is filtered by the umask
        st = path.lstat()
    except OSError as exc:
        raise TetherError(
            ErrorCode.RUNTIME_DIR_UNSAFE, f"cannot create {what} {path}: {exc.strerror}"
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise TetherError(ErrorCode.RUNTIME_DIR_UNSAFE, f"{what} {path} is not a directory")
    if st.st_uid != os.getuid():
        raise TetherError(
            ErrorCode.RUNTIME_DIR_UNSAFE,
            f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
            "refusing to use it. Set TETHER_RUNTIME_DIR/TETHER_HOME to a directory you own.",
        )
    if st.st_mode & 0o077 and repair:
        os.chmod(path, 0o700)
    elif st.st_mode & 0o077:
        raise TetherError(
            ErrorCode.RUNTIME_DIR_UNSAFE,
            f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be 0700 "
            f"(run: chmod 700 {path})",
        )
    return path


@dataclass(frozen=True, slots=True)
class GuardianPaths:
    """Every path one guardian uses."""

    key: str
    runtime: Path  # private per-key runtime directory
    state: Path  # private per-key state directory

    @property
    def socket(self) -> Path:
        return self.runtime / "rpc.sock"

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.socket}"

    @property
    def lock(self) -> Path:
        return self.runtime / "guardian.lock"

    @property
    def start_lock(self) -> Path:
        return self.runtime / "start.lock"

    @property
    def handover(self) -> Path:
        """A live upgrade's handover document (docs/protocol.md#live-upgrade): there while the
        guardian hands itself over to the installed code."""
        return self.runtime / "handover.json"

    @property
    def info(self) -> Path:
        return self.runtime / "guardian.json"

    @property
    def catalog(self) -> Path:
        return self.state / "catalog.sqlite3"

    @property
    def journals(self) -> Path:
        return self.state / "journals"

    @property
    def log(self) -> Path:
        return self.state / "guardian.log"

    @property
    def scratch(self) -> Path:
        """Private files the guardian writes for its shells (rc file, command files)."""
        return self.runtime / "scratch"

    def temporary(self, thread_id: str) -> Path:
        """A thread's managed temporary directory (``TETHER_TMP``, docs/tools.md#editfiles):
        helpers that EditFiles writes and releases, and commands may use."""
        return self.runtime / "tmp" / thread_id


def guardian_paths(config: Config, principal: str, workspace_root: str) -> GuardianPaths:
    """Resolve and create (0700, owner-checked) the directories of one guardian."""
    key = guardian_key(principal, workspace_root)
    runtime_root = ensure_private_dir(config.runtime_dir, what="runtime dir")
    state_root = ensure_private_dir(config.state_home, what="state dir")
    paths = GuardianPaths(
        key=key,
        runtime=ensure_private_dir(runtime_root / key, what="guardian runtime dir"),
        state=ensure_private_dir(
            ensure_private_dir(state_root / "guardians", what="guardians state dir", repair=True) / key,
            what="guardian state dir"),
    )
    if len(str(paths.socket).encode()) > MAX_IPC_PATH_BYTES:
        raise TetherError(
            ErrorCode.RUNTIME_DIR_UNSAFE,
            f"socket path {paths.socket} is longer than {MAX_IPC_PATH_BYTES} bytes; "
            "set TETHER_RUNTIME_DIR to a shorter directory",
        )
    ensure_private_dir(paths.journals, what="journal dir")
    ensure_private_dir(paths.scratch, what="scratch dir")
    return paths


def write_private_file(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Atomically write ``data`` to ``path`` with mode 0600 (``durable``: fsync first)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
