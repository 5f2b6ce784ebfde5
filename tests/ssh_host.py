"""A real OpenSSH server on 127.0.0.1, and a "remote" side that shares nothing with the
local one but the SSH link (docs/development.md#the-ssh-tests).

Each :class:`SshHost` has a fresh host key and client key, its own sshd config, and gives
every login its own HOME, TETHER_HOME, TETHER_RUNTIME_DIR and PATH (sshd's ``SetEnv``). The
client side gets a private ssh configuration through a wrapper named by ``TETHER_SSH``
(``ssh -F FILE``): the user's ``~/.ssh`` is never read. ``scripts/test`` installs
``openssh-server`` when ``/usr/sbin/sshd`` is missing. Used by the tests and by
``scripts/bench``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

SSHD = Path("/usr/sbin/sshd")
#: The host name the client configuration gives the server (what ssh:// URLs name).
ALIAS = "tether-test"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return Path(f"{path}.pub").read_text().strip()


class SshHost:
    """sshd on a free loopback port, with the "remote" side's directories under ``base``."""

    def __init__(self, base: Path, *, alias: str = ALIAS, idle_s: int = 600) -> None:
        if not SSHD.exists():
            raise RuntimeError(f"{SSHD} is missing: ./scripts/test installs openssh-server")
        self.base = base
        self.alias = alias
        self.dir = base / "sshd"
        self.dir.mkdir(mode=0o700, parents=True)
        self.remote_home = base / "rhome"
        self.remote_home.mkdir(mode=0o700)
        (self.remote_home / ".bashrc").write_text("# the remote test home\n")
        self.remote_state = base / "rstate"
        self.remote_runtime = base / "rrun"
        self.port = free_port()
        host_key = self.dir / "host_ed25519"
        host_pub = _keygen(host_key)
        client_key = self.dir / "client_ed25519"
        client_pub = _keygen(client_key)
        (self.dir / "authorized_keys").write_text(client_pub + "\n")
        os.chmod(self.dir / "authorized_keys", 0o600)
        venv_bin = Path(sys.executable).parent
        remote_path = f"{venv_bin}:/usr/local/bin:/usr/bin:/bin"
        self.config = self.dir / "sshd_config"
        self.config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
            f"PidFile {self.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}", "StrictModes no",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", "UsePAM no",
            "AllowStreamLocalForwarding local", "AllowTcpForwarding local", "X11Forwarding no",
            "PrintMotd no", "PrintLastLog no", "LogLevel ERROR", "MaxSessions 64",
            "MaxStartups 64",
            f"SetEnv HOME={self.remote_home} TETHER_HOME={self.remote_state} "
            f"TETHER_RUNTIME_DIR={self.remote_runtime} PATH={remote_path} "
            "TETHER_GUARDIAN_IDLE_S=600",
            "",
        ]))
        known = self.dir / "known_hosts"
        known.write_text(f"{alias}-key {host_pub}\n")
        self.client_config = self.dir / "ssh_config"
        self.client_config.write_text("\n".join([
            f"Host {alias}", "  HostName 127.0.0.1", f"  Port {self.port}",
            f"  User {pwd.getpwuid(os.getuid()).pw_name}",
            f"  IdentityFile {client_key}", "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {known}", "  GlobalKnownHostsFile /dev/null",
            f"  HostKeyAlias {alias}-key", "  StrictHostKeyChecking yes", "  LogLevel ERROR",
            # A host nothing listens for: connections to it are refused at once.
            f"Host {alias}-down", "  HostName 127.0.0.1", f"  Port {free_port()}",
            f"  UserKnownHostsFile {known}", "  GlobalKnownHostsFile /dev/null",
            "",
        ]))
        os.chmod(self.client_config, 0o600)
        self.wrapper = self.dir / "ssh"
        self.wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {self.client_config} "$@"\n')
        os.chmod(self.wrapper, 0o700)
        self.log = self.dir / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.idle_s = idle_s

    def env(self) -> dict[str, str]:
        """What the local front-end needs to reach this host (and only it)."""
        return {"TETHER_SSH": str(self.wrapper), "TETHER_SSH_IDLE_S": str(self.idle_s)}

    def url(self, path: Path | str) -> str:
        return f"ssh://{self.alias}{path}"

    def start(self) -> None:
        """Start sshd and wait until it accepts connections."""
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege-separation dir
        self.proc = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.log.open("ab"), start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=1):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd did not listen on {self.port}: {self.log.read_text()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server and every connection it serves (as a host going away does)."""
        if self.proc is None:
            return
        with contextlib.suppress(psutil.Error):
            procs = psutil.Process(self.proc.pid).children(recursive=True)
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def masters(self, runtime_dir: Path) -> list[psutil.Process]:
        """The local ssh master connections whose control sockets are under
        ``runtime_dir``."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                line = " ".join(proc.info["cmdline"] or [])
                if "ControlMaster=yes" in line and f"ControlPath={runtime_dir}" in line:
                    found.append(proc)
        return found
