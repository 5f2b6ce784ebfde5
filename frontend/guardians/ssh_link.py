"""One multiplexed OpenSSH connection per host (docs/hosts.md#transport).

The system's ``ssh`` (or the program ``TETHER_SSH`` names) with the user's own configuration:
aliases, ProxyJump, identity files, known hosts. A master connection per host is started on
demand (``ControlMaster``, its control socket in a private directory under the runtime dir)
and ends by itself once nothing has used it for ``TETHER_SSH_IDLE_S`` (``ControlPersist``);
every other ssh run for that host rides on it. Every step has a deadline: connecting,
running the far end (``tether remote``), adding a forward. A host that cannot be reached is
``host_unreachable`` naming the host and quoting ssh's own error.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.config import Config
from tether.shared.paths import MAX_IPC_PATH_BYTES, ensure_private_dir, write_private_file
from tether.shared.ssh_target import SshHost

#: Seconds to reach a host and authenticate (ssh's ConnectTimeout, plus this side's slack).
CONNECT_TIMEOUT_S = 10.0
#: Seconds for the far end to find or start its guardian (a start takes up to 15 s there).
BOOTSTRAP_TIMEOUT_S = 30.0
#: Seconds for the master to add a socket forward, or answer a check.
FORWARD_TIMEOUT_S = 5.0
#: A master with nothing open ends after this long (TETHER_SSH_IDLE_S).
DEFAULT_SSH_IDLE_S = 600
#: How the far end's answer is told from whatever a login prints around it.
MARKER = "TETHER-REMOTE "
#: Where ``tether hosts install`` puts Tether on a host (under its home directory).
INSTALL_DIR = ".local/share/tether/venv"

#: Finds ``tether`` on the host: the configured path, then the session's PATH, then the
#: login PATH, then where ``tether hosts install`` puts it; runs it with the arguments.
#: Given to ``sh -c`` (stdin stays the caller's: ``tether attach`` types through it).
FIND_AND_RUN = f"""
t="$1"; shift
[ -n "$t" ] && [ -x "$t" ] || t=$(command -v tether 2>/dev/null)
[ -n "$t" ] && [ -x "$t" ] || t=$(sh -lc 'command -v tether' </dev/null 2>/dev/null | tail -n 1)
[ -n "$t" ] && [ -x "$t" ] || t="$HOME/{INSTALL_DIR}/bin/tether"
if [ ! -x "$t" ]; then
  echo '{MARKER}{{"ok": false, "missing": "tether"}}'
  exit 127
fi
exec "$t" "$@"
"""


@dataclass(frozen=True, slots=True)
class SshSettings:
    """What every link of a front-end shares: the ssh program, how long an idle master
    lives, and the ``tether`` configured per host."""

    program: str
    idle_s: int
    tether_paths: Mapping[str, str]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SshSettings:
        """TETHER_SSH (else ``ssh`` on PATH), TETHER_SSH_IDLE_S, and the hosts file
        (TETHER_HOSTS_FILE, else ``$XDG_CONFIG_HOME/tether/hosts.toml``)."""
        env = os.environ if env is None else env
        program = env.get("TETHER_SSH") or shutil.which("ssh") or "ssh"
        raw = env.get("TETHER_SSH_IDLE_S", "").strip()
        try:
            idle = int(raw) if raw else DEFAULT_SSH_IDLE_S
        except ValueError:
            raise TetherError(ErrorCode.CONFIG_INVALID,
                              f"TETHER_SSH_IDLE_S must be a whole number of seconds, got {raw!r}"
                              ) from None
        if not 1 <= idle <= 7 * 86400:
            raise TetherError(ErrorCode.CONFIG_INVALID,
                              f"TETHER_SSH_IDLE_S must be from 1 to 604800, got {idle}")
        return cls(program=program, idle_s=idle, tether_paths=_tether_paths(env))


def hosts_file(env: Mapping[str, str]) -> Path:
    if env.get("TETHER_HOSTS_FILE"):
        return Path(env["TETHER_HOSTS_FILE"])
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or str(Path.home()),
                                                       ".config")
    return Path(base) / "tether" / "hosts.toml"


def _tether_paths(env: Mapping[str, str]) -> dict[str, str]:
    """``[hosts."NAME"] tether = "/path/to/tether"`` entries of the hosts file."""
    import tomllib

    path = hosts_file(env)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TetherError(ErrorCode.CONFIG_INVALID, f"cannot read {path}: {exc}") from None
    hosts = data.get("hosts", {})
    found: dict[str, str] = {}
    if isinstance(hosts, dict):
        for name, entry in hosts.items():
            if isinstance(entry, dict) and isinstance(entry.get("tether"), str):
                found[str(name)] = entry["tether"]
    return found


def unreachable(host: SshHost, what: str, ssh_error: str) -> TetherError:
    """``host_unreachable``: ``what`` failed, in ssh's own words."""
    said = ssh_error.strip().splitlines()
    quoted = " / ".join(line.strip() for line in said[-3:] if line.strip()) or "(ssh said nothing)"
    return TetherError(
        ErrorCode.HOST_UNREACHABLE,
        f"cannot reach host {host.name} over SSH ({what}): {quoted}. Nothing was sent. "
        f"`tether hosts check {host.name}` says what is missing.",
        {"host": host.name, "ssh_error": quoted, "input_sent": False})


class SshLink:
    """The master connection to one host, shared by every front-end of this user (its
    control socket is found by path), and the socket forwards made through it."""

    def __init__(self, host: SshHost, config: Config, settings: SshSettings) -> None:
        self.host = host
        self.settings = settings
        self.state_home = config.state_home
        self.dir = ensure_private_dir(config.runtime_dir / "ssh", what="ssh control dir")
        self.control = self.dir / f"{host.key}.ctl"
        self.master_pid: int | None = None
        self._pidfd: int | None = None
        self._poll: select.poll | None = None
        #: local socket -> remote socket, made on the master that runs now.
        self._forwards: dict[str, str] = {}
        self._lock = asyncio.Lock()

    # -- the master ------------------------------------------------------------------------

    def options(self) -> list[str]:
        """ssh's argv up to the destination: this link's control socket, no prompts (a
        front-end has no terminal to ask on), and the deadlines."""
        return [
            self.settings.program,
            "-o", f"ControlPath={self.control}",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={int(CONNECT_TIMEOUT_S)}",
            "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3",
            "-o", "StreamLocalBindUnlink=yes", "-o", "StreamLocalBindMask=0177",
        ]

    def alive(self) -> bool:
        """The master this link last saw still runs (one poll of its pidfd)."""
        return self._poll is not None and not self._poll.poll(0)

    async def ensure(self) -> None:
        """A running master for this host: this link's, another front-end's, or a new one."""
        if self.alive():
            return
        async with self._lock:
            if not self.alive():
                await asyncio.to_thread(self._ensure)

    def _ensure(self) -> None:
        lock = filelock.FileLock(str(self.dir / f"{self.host.key}.lock"), mode=0o600,
                                 timeout=CONNECT_TIMEOUT_S + FORWARD_TIMEOUT_S)
        try:
            with lock:
                pid = self._check()
                if pid is None:
                    self._start()
                    pid = self._check()
                    if pid is None:
                        raise unreachable(self.host, "connect",
                                          "the master connection ended as soon as it started")
                self._watch(pid)
        except filelock.Timeout:
            raise unreachable(self.host, "connect", "another front-end has been connecting to "
                              f"it for over {lock.timeout:g}s") from None
        remember_host(self.state_home, self.host)

    def _start(self) -> None:
        # A control socket left by a master that was killed would make the new one run
        # without multiplexing ("already exists, disabling multiplexing").
        self.control.unlink(missing_ok=True)
        argv = [*self.options(), "-o", "ControlMaster=yes",
                "-o", f"ControlPersist={self.settings.idle_s}", "-N", "-f",
                *self.host.destination()]
        done = self._ssh(argv, "connect", CONNECT_TIMEOUT_S + 5, "no connection",
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True, cwd="/")
        if done.returncode != 0:
            raise unreachable(self.host, "connect", done.stderr.decode(errors="replace"))

    def _ssh(self, argv: list[str], step: str, timeout_s: float, late: str,
             **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """Run the ssh program for ``step``: past ``timeout_s`` (``late`` says what did not
        happen in time), or when the program cannot run, the host is unreachable."""
        try:
            return subprocess.run(argv, timeout=timeout_s, **kwargs)
        except subprocess.TimeoutExpired:
            raise unreachable(self.host, step, f"{late} within {timeout_s:g}s") from None
        except OSError as exc:
            raise unreachable(self.host, step,
                              f"cannot run {self.settings.program}: {exc.strerror}") from None

    def _check(self) -> int | None:
        """The pid of the master behind the control socket, or None."""
        if not self.control.exists():
            return None
        try:
            done = subprocess.run([*self.options(), "-O", "check", *self.host.destination()],
                                  stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=FORWARD_TIMEOUT_S)
        except (subprocess.TimeoutExpired, OSError):
            return None
        found = re.search(rb"pid=(\d+)", done.stderr + done.stdout)
        return int(found.group(1)) if done.returncode == 0 and found else None

    def _watch(self, pid: int) -> None:
        if pid == self.master_pid and self.alive():
            return
        self._unwatch()
        self._forwards.clear()  # a new master has none of the old one's forwards
        self.master_pid = pid
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError:
            return  # gone already: alive() says so, and the next call starts another
        self._poll = select.poll()
        self._poll.register(self._pidfd, select.POLLIN)

    def _unwatch(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
        self._pidfd = None
        self._poll = None

    def close(self) -> None:
        """Forget the master (it goes on for other front-ends until it is idle)."""
        self._unwatch()

    # -- running things on the host --------------------------------------------------------

    async def run(self, remote_argv: list[str], *, stdin: bytes = b"",
                  timeout_s: float, what: str) -> subprocess.CompletedProcess[bytes]:
        """Run ``remote_argv`` on the host (quoted for its shell) over the master."""
        await self.ensure()
        argv = self.command_argv(remote_argv, tty=False)
        return await asyncio.to_thread(self._ssh, argv, what, timeout_s, "no answer",
                                       input=stdin, capture_output=True)

    def tether_argv(self, args: list[str]) -> list[str]:
        """The host's argv that runs its ``tether`` with ``args`` (:data:`FIND_AND_RUN`)."""
        configured = self.settings.tether_paths.get(self.host.name) or \
            self.settings.tether_paths.get(self.host.host, "")
        return ["sh", "-c", FIND_AND_RUN, "sh", configured, *args]

    def command_argv(self, remote_argv: list[str], *, tty: bool) -> list[str]:
        """The local argv of ssh running ``remote_argv`` on the host over the master (a
        person's command, with a terminal when ``tty``)."""
        command = " ".join(shlex.quote(arg) for arg in remote_argv)
        return [*self.options(), "-o", "ControlMaster=no", "-t" if tty else "-T",
                *self.host.destination(), command]

    async def far_end(self, args: list[str], *, timeout_s: float = BOOTSTRAP_TIMEOUT_S
                      ) -> dict[str, Any]:
        """``tether ARGS`` on the host (found as :data:`FIND_AND_RUN` says), and the answer it
        printed after :data:`MARKER` (secrets come back this way, never on a command line)."""
        done = await self.run(self.tether_argv(args), timeout_s=timeout_s, what="bootstrap")
        out = done.stdout.decode(errors="replace")
        for line in reversed(out.splitlines()):
            if line.startswith(MARKER):
                try:
                    reply = json.loads(line[len(MARKER):])
                except ValueError:
                    break
                if isinstance(reply, dict):
                    if reply.get("missing") == "tether":
                        raise TetherError(
                            ErrorCode.HOST_UNREACHABLE,
                            f"host {self.host.name} has no `tether` (not at the path configured "
                            "for it, not on its PATH or login PATH, not installed by `tether "
                            f"hosts install`). Run `tether hosts install {self.host.name}`. "
                            "Nothing was sent.",
                            {"host": self.host.name, "missing": "tether", "input_sent": False})
                    return reply
        if done.returncode == 255:  # ssh's own failure: the link, not the far end
            raise unreachable(self.host, "bootstrap", done.stderr.decode(errors="replace"))
        err = (done.stderr.decode(errors="replace") or out).strip().splitlines()[-3:]
        raise TetherError(
            ErrorCode.HOST_UNREACHABLE,
            f"`tether {' '.join(args[:2])}` on host {self.host.name} gave no answer (exit "
            f"status {done.returncode}): {' / '.join(err) or 'nothing printed'}. Its Tether may "
            f"be too old: `tether hosts check {self.host.name}`. Nothing was sent.",
            {"host": self.host.name, "exit_status": done.returncode, "input_sent": False})

    async def forward(self, local: Path, remote: str) -> None:
        """Forward the unix socket ``local`` (private: its directory is 0700, the socket
        0600) to ``remote`` on the host, through the master; a forward the master has is
        kept."""
        if self._forwards.get(str(local)) == remote and self.alive():
            return
        if len(str(local).encode()) > MAX_IPC_PATH_BYTES or ":" in str(local) + remote:
            raise TetherError(ErrorCode.RUNTIME_DIR_UNSAFE,
                              f"cannot forward {local} to {remote}: a socket path over "
                              f"{MAX_IPC_PATH_BYTES} bytes or holding ':'")
        await self.ensure()
        argv = [*self.options(), "-O", "forward", "-L", f"{local}:{remote}",
                *self.host.destination()]
        done = await asyncio.to_thread(self._ssh, argv, "forward", FORWARD_TIMEOUT_S,
                                       "the master did not add the forward",
                                       stdin=subprocess.DEVNULL, capture_output=True)
        if done.returncode != 0:
            raise unreachable(self.host, "forward", done.stderr.decode(errors="replace"))
        self._forwards[str(local)] = remote


def remember_host(state_home: Path, host: SshHost) -> None:
    """Note ``host`` under the state dir's ``hosts/`` (what ``tether ls --all-hosts``
    asks): one small file per host, written once."""
    folder = ensure_private_dir(state_home / "hosts", what="hosts state dir")
    path = folder / f"{host.key}.json"
    if not path.exists():
        write_private_file(path, json.dumps({"host": host.name}).encode(), durable=False)


def known_hosts(state_home: Path) -> list[SshHost]:
    """The hosts this user's front-ends have reached (``remember_host``), by name."""
    found: list[SshHost] = []
    for path in sorted((state_home / "hosts").glob("*.json")):
        try:
            found.append(SshHost.parse(str(json.loads(path.read_text())["host"])))
        except (OSError, ValueError, KeyError, TypeError, TetherError):
            continue
    return sorted(set(found), key=lambda h: h.name)
