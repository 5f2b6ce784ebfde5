"""``tether doctor``: is this installation healthy, and if not, what command fixes it.

It looks and never changes anything: no directory is created, no guardian started or stopped,
no lock taken (who holds a lock is read from ``/proc/locks``). Each finding carries the
command that fixes it; the exit status is 1 when any finding needs action, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import stat
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from tether.frontend.guardians.health import measured, restart_for, upgrade_for
from tether.frontend.guardians.locator import GuardianLocator
from tether.frontend.person.connect import announced
from tether.frontend.person.term import Progress, visible
from tether.frontend.usage import DEFAULT_MAX_BYTES, KEEP_ROTATED
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import THREAD_MAX_BYTES, THREAD_MAX_RECORDS
from tether.protocol.versions import CODE_VERSION, capabilities_for, known_minor_versions
from tether.shared.clock import Clock
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths
from tether.shared.store.store_errors import StoreError
from tether.shared.store.view import catalog_figures

PACKAGES = ("tether", "mcp", "pyzmq", "msgpack", "ptyprocess", "pyte", "pydantic", "filelock",
            "psutil", "wcwidth")
#: Retention limits (docs/tools.md#retention), to compare what is on disk with.


@dataclass
class Finding:
    level: str  # ok | info | warn | action
    what: str
    fix: str | None = None


class Doctor:
    def __init__(self, config: Config, env: dict[str, str], clock: Clock | None = None) -> None:
        self.config = config
        self.env = env
        self.clock = clock or Clock()
        self.findings: list[Finding] = []

    def add(self, level: str, what: str, fix: str | None = None) -> None:
        self.findings.append(Finding(level, what, fix))

    # -- versions --------------------------------------------------------------------------

    def versions(self) -> None:
        py = sys.version_info
        level = "ok" if py >= (3, 11) else "action"
        self.add(level, f"Python {py.major}.{py.minor}.{py.micro} ({sys.executable})",
                 None if level == "ok" else "install Python 3.11 or newer and reinstall Tether")
        found, missing = [], []
        for name in PACKAGES:
            try:
                found.append(f"{name} {metadata.version(name)}")
            except metadata.PackageNotFoundError:
                missing.append(name)
        try:
            import zmq

            found.append(f"libzmq {zmq.zmq_version()}")
        except ImportError:
            pass
        self.add("ok", "packages: " + ", ".join(found))
        if missing:
            self.add("action", f"packages missing: {', '.join(missing)}",
                     f"{sys.executable} -m pip install {' '.join(missing)}")
        latest = known_minor_versions()[-1]
        self.add("ok", f"this Tether speaks protocol 1.0-{latest}")

    # -- directories -----------------------------------------------------------------------

    def private_dir(self, path: Path, what: str, variable: str) -> bool:
        """Owner and mode of a directory that must be 0700 (docs/security.md#state-and-runtime-directories);
        True when it exists."""
        try:
            st = path.lstat()
        except FileNotFoundError:
            self.add("info", f"{what} {path} does not exist yet (created on first use)")
            return False
        except OSError as exc:
            self.add("action", f"{what} {path} cannot be read: {exc.strerror}",
                     f"set {variable} to a directory you own")
            return False
        if not stat.S_ISDIR(st.st_mode):
            self.add("action", f"{what} {path} is not a directory", f"rm {path}  # or set {variable}")
            return False
        if st.st_uid != os.getuid():
            self.add("action", f"{what} {path} is owned by uid {st.st_uid}, not by you "
                     f"(uid {os.getuid()}); Tether refuses to use it",
                     f"set {variable} to a directory you own")
        elif st.st_mode & 0o077:
            self.add("action", f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}; it must "
                     "be 0700 (Tether refuses to use it)", f"chmod 700 {path}")
        else:
            self.add("ok", f"{what} {path} (0700, yours)")
        return True

    # -- guardians -------------------------------------------------------------------------

    async def guardians(self) -> None:
        entries = announced(self.config)
        keys_with_info = {path.parent.name for path, _ in entries}
        if self.config.runtime_dir.is_dir():
            for key_dir in sorted(p for p in self.config.runtime_dir.iterdir() if p.is_dir()):
                if key_dir.name not in keys_with_info:
                    self._leftovers(key_dir)
        if not entries:
            self.add("info", "no guardian has announced itself (one starts with the first MCP "
                     "call for a workspace)")
        locator = GuardianLocator(self.config)
        try:
            for path, info in entries:
                with Progress(f"checking guardian {path.parent.name}"):
                    await self._guardian(locator, path, info)
        finally:
            locator.close()

    def _leftovers(self, key_dir: Path) -> None:
        """A guardian dir without guardian.json: a stopped guardian, or a crashed one's locks."""
        lock = key_dir / "guardian.lock"
        holders = lock_holders(lock) if lock.exists() else []
        if holders:
            self.add("warn", f"{lock} is held by pid {', '.join(map(str, holders))}, which has "
                     "not announced itself (still starting, or stuck)",
                     f"kill {' '.join(map(str, holders))}  # if it stays like this")
        sock = key_dir / "rpc.sock"
        note = key_dir / "remote.json"  # the forward of a guardian on another host
        if note.exists():
            try:
                remote = json.loads(note.read_text())
            except (OSError, ValueError):
                remote = {}
            self.add("info", f"{sock} forwards to the guardian of "
                     f"{remote.get('workspace_root', '?')} on host {remote.get('host', '?')} "
                     f"(over SSH; `tether doctor --host {remote.get('host', 'HOST')}` checks "
                     "it there)")
            return
        if sock.exists() and not holders:
            self.add("info", f"stale socket {sock} of a stopped guardian (harmless; the next "
                     "guardian replaces it)", f"rm {sock}")

    async def _guardian(self, locator: GuardianLocator, path: Path,
                        info: dict[str, Any] | None) -> None:
        if info is None:
            self.add("action", f"{path} is unreadable or malformed", f"rm {path}")
            return
        workspace = info.get("workspace_root", "?")
        ident = ProcessIdentity.from_dict(info)
        restart = restart_for(info)
        if ident is None or not ident.alive():
            fix = restart if os.path.isdir(str(workspace)) else f"rm {path}"
            self.add("action", f"stale {path}: guardian pid {info.get('pid')} of {workspace} is "
                     "gone (its running records become unknown at the next start)", fix)
            return
        lock = path.parent / "guardian.lock"
        holders = lock_holders(lock) if lock.exists() else []
        if holders and info.get("pid") not in holders:
            self.add("action", f"{lock} is held by pid {holders}, not by the announced guardian "
                     f"pid {info.get('pid')}", f"kill {' '.join(map(str, holders))}")
        paths = GuardianPaths(key=path.parent.name, runtime=path.parent,
                              state=self.config.state_home / "guardians" / path.parent.name)
        asked = self.clock.monotonic()
        try:
            handle = await asyncio.wait_for(locator.existing(paths), 10)
        except (TetherError, TimeoutError) as exc:
            if isinstance(exc, TetherError):
                exc = measured(exc, paths, info, str(workspace),
                               waited_s=self.clock.monotonic() - asked)
            message = exc.message if isinstance(exc, TetherError) else "no answer in 10s"
            stopped = (isinstance(exc, TetherError) and exc.code == ErrorCode.GUARDIAN_UNRESPONSIVE
                       and exc.data.get("process_status") == psutil.STATUS_STOPPED)
            # A stopped guardian only needs continuing (as the message says); any other one
            # that does not answer is replaced: restart stops it by identity, SIGTERM first.
            fix = (f"kill -CONT {info.get('pid')}  # then, if it stays unresponsive: {restart}"
                   if stopped else restart)
            what = ": " if stopped else " is alive but its handshake failed: "
            self.add("action", f"guardian pid {info.get('pid')} of {workspace}{what}{message}",
                     fix)
            return
        if handle is None:
            self.add("action", f"guardian pid {info.get('pid')} of {workspace} is alive but does "
                     "not answer", f"kill {info.get('pid')}  # the next call starts a new one")
            return
        handle.client.close()
        running_code = info.get("code_version")
        if running_code != CODE_VERSION:
            # Older code than the installed one (or code from before guardians said theirs):
            # a live upgrade hands it over without ending anything, when it can.
            live = handle.can_hand_over
            self.add("action", f"guardian of {workspace} (pid {info.get('pid')}) runs code "
                     f"{running_code or 'from before guardians named their code'}, not the "
                     f"installed {CODE_VERSION}" + ("" if live else "; it is too old to hand itself "
                                          "over, so only a restart upgrades it"),
                     upgrade_for(info) + ("  # keeps its terminals" if live else
                                          f"  # says what a restart ends; then: {restart}"))
        latest = known_minor_versions()[-1]
        caps = ", ".join(sorted(handle.capabilities))
        lacks = sorted(str(c) for c in capabilities_for(latest) - capabilities_for(handle.version))
        if handle.version < latest:
            # Not merely a warning: what it lacks is refused (capability_missing), and only a
            # restart gives it (docs/protocol.md#versions-and-capabilities). Guardians outlive upgrades, so
            # this is the place to say it.
            self.add("action", f"guardian of {workspace} (pid {info.get('pid')}) speaks protocol "
                     f"{handle.version}, older than this Tether's {latest}: it lacks "
                     f"{', '.join(lacks)}, so calls that need them are refused "
                     "(capability_missing) until it is upgraded",
                     f"{upgrade_for(info)}  # keeps its running terminals"
                     if handle.can_hand_over else
                     f"{restart}  # ends its running terminals; their records stay readable")
        else:
            self.add("ok", f"guardian of {workspace}: pid {info.get('pid')}, alive, protocol "
                     f"{handle.version}, capabilities {caps}")
        self._sizes(paths, str(workspace), restart)

    def _sizes(self, paths: GuardianPaths, workspace: str, restart: str) -> None:
        """Catalog and journals on disk against the retention limits (docs/tools.md#retention)."""
        catalog_bytes = sum(p.stat().st_size for p in paths.state.glob("catalog.sqlite3*"))
        try:
            figures = catalog_figures(paths.catalog, THREAD_MAX_RECORDS)
        except StoreError as exc:
            self.add("action", f"catalog {paths.catalog} cannot be read: {exc}",
                     restart)
            return
        known, threads, over_records = (figures.execution_ids, figures.threads,
                                        figures.crowded_threads)
        journal_bytes, per_execution, orphans = 0, dict[str, int](), 0
        for seg in paths.journals.glob("*.seg"):
            size = seg.stat().st_size
            journal_bytes += size
            execution_id = seg.name.split(".")[0]
            per_execution[execution_id] = per_execution.get(execution_id, 0) + size
            if execution_id not in known:
                orphans += size
        budget = max(1, threads) * THREAD_MAX_BYTES
        level = "ok" if journal_bytes <= budget else "warn"
        self.add(level, f"{workspace}: catalog {catalog_bytes / 1e6:.1f} MB, {len(known)} records "
                 f"in {threads} threads; journals {journal_bytes / 1e6:.1f} MB of "
                 f"{budget / 1e6:.0f} MB allowed ({threads} threads × 16 MiB)",
                 None if level == "ok" else "retention trims on the next catalog operation; "
                 "if it stays, restart the guardian")
        kept = self.config.output_head_bytes + 2 * self.config.output_tail_bytes
        big = [e for e, size in per_execution.items() if size > kept]
        if big:
            self.add("warn", f"{len(big)} journals hold more than the first "
                     f"{self.config.output_head_bytes // 1024} KiB and last "
                     f"{self.config.output_tail_bytes // 1024} KiB retained per execution "
                     "(plus one segment being written)",
                     restart)
        if over_records:
            self.add("warn", f"threads over {THREAD_MAX_RECORDS} records: {', '.join(over_records)}",
                     "retention prunes them on the next listing (tether ls)")
        if orphans:
            self.add("warn", f"{orphans} bytes of journals belong to no record in "
                     f"{paths.journals}", f"rm those segments: ls {paths.journals}")

    # -- usage log -------------------------------------------------------------------------

    def usage_log(self) -> None:
        raw = self.env.get("TETHER_USAGE_LOG", "")
        if not raw:
            self.add("info", "usage log off (set TETHER_USAGE_LOG=/path/usage.jsonl to record "
                     "tool calls; `tether report --log` summarises it)")
            return
        path = Path(raw).expanduser().absolute()
        limit = self.env.get("TETHER_USAGE_LOG_MAX_BYTES", "")
        try:
            max_bytes = int(limit) if limit else DEFAULT_MAX_BYTES
        except ValueError:
            self.add("action", f"TETHER_USAGE_LOG_MAX_BYTES={limit!r} is not a number of bytes",
                     "export TETHER_USAGE_LOG_MAX_BYTES=16777216")
            max_bytes = DEFAULT_MAX_BYTES
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            self.usage_log_to_create(path)
            return
        except OSError as exc:
            self.add("action", f"usage log {path} cannot be examined ({exc.strerror})",
                     f"ls -ld {path.parent}")
            return
        unfit = _unfit_filesystem(path)
        if stat.S_ISDIR(st.st_mode):
            self.add("action", f"usage log {path} is a directory: nothing can be logged",
                     f"set TETHER_USAGE_LOG to a file path, such as {path / 'usage.jsonl'}")
        elif not stat.S_ISREG(st.st_mode):
            self.add("action", f"usage log {path} is not a regular file: nothing is logged",
                     "set TETHER_USAGE_LOG to a regular file you own")
        elif unfit:
            self.add("action", f"usage log {path} {unfit}: nothing can be logged",
                     self.usage_log_elsewhere())
        elif st.st_uid != os.getuid():
            self.add("action", f"usage log {path} is owned by uid {st.st_uid}, not you",
                     "set TETHER_USAGE_LOG to a file you own")
        elif stat.S_IMODE(st.st_mode) != 0o600:
            self.add("action", f"usage log {path} has mode {stat.S_IMODE(st.st_mode):04o}; it "
                     "must be 0600", f"chmod 600 {path}")
        elif not os.access(path, os.W_OK):
            self.add("action", f"usage log {path} cannot be written (read-only or immutable)",
                     f"lsattr {path}; chattr -i {path}, or set TETHER_USAGE_LOG to another file")
        else:
            self.usage_log_size(path, st.st_size, max_bytes)

    def usage_log_size(self, path: Path, size: int, max_bytes: int) -> None:
        """Under its limit, and able to rotate when it gets there? (A full log that cannot
        be rotated gets no more lines.)"""
        of = (f"{size / 1e6:.1f} MB of {max_bytes / 1e6:.1f} MB" if max_bytes >= 1e6
              else f"{size} of {max_bytes} bytes")
        blocked = _rotation_blocked(path)
        if blocked:
            why, fix = blocked
            self.add("action", f"usage log {path} cannot be rotated: {why}; " + (
                f"it is over its limit ({of}), so nothing more is written to it"
                if size >= max_bytes else f"once it reaches its limit ({of} now) nothing more "
                "will be written to it"), fix)
        elif size >= max_bytes:
            self.add("warn", f"usage log {path} is over its limit ({of}); the next line "
                     "written rotates it", None)
        else:
            self.add("ok", f"usage log {path}: {of} before rotation (0600)")

    def usage_log_elsewhere(self) -> str:
        return ("set TETHER_USAGE_LOG to a file on a disk, such as "
                f"{self.config.state_home / 'usage.jsonl'}")

    def usage_log_to_create(self, path: Path) -> None:
        """A log path that does not exist yet: can ``tether serve`` create it (and the
        directories above it, which it makes at 0700)?"""
        ancestor = path.parent
        while not os.path.exists(ancestor):
            ancestor = ancestor.parent
        unfit = _unfit_filesystem(ancestor)
        if not ancestor.is_dir():
            self.add("action", f"usage log {path} cannot be created: {ancestor} is a file, "
                     "not a directory", "set TETHER_USAGE_LOG to a path under a directory")
        elif unfit:
            self.add("action", f"usage log {path} cannot be created: {ancestor} {unfit}",
                     self.usage_log_elsewhere())
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            self.add("action", f"usage log {path} cannot be created: {ancestor} is not "
                     "writable", f"chmod u+wx {ancestor}, or set TETHER_USAGE_LOG elsewhere")
        else:
            self.add("ok", f"usage log {path} does not exist yet (created on the first "
                     "tool call)")

    async def run(self) -> None:
        self.versions()
        self.private_dir(self.config.state_home, "state dir", "TETHER_HOME")
        if self.private_dir(self.config.runtime_dir, "runtime dir", "TETHER_RUNTIME_DIR"):
            for key_dir in sorted(p for p in self.config.runtime_dir.iterdir() if p.is_dir()):
                st = key_dir.stat()
                if st.st_mode & 0o077 or st.st_uid != os.getuid():
                    self.private_dir(key_dir, "guardian runtime dir", "TETHER_RUNTIME_DIR")
        await self.guardians()
        self.usage_log()


def _rotation_blocked(path: Path) -> tuple[str, str] | None:
    """Why renaming the log to ``.1`` (and older ones up) would be refused, and the fix."""
    if not os.access(path.parent, os.W_OK | os.X_OK):  # also false for an immutable directory
        return (f"{path.parent} refuses renames (not writable, or immutable)",
                f"chmod u+w {path.parent} (lsattr -d {path.parent}: chattr -i if immutable), or "
                "set TETHER_USAGE_LOG to a file in a directory you can write")
    for index in range(1, KEEP_ROTATED + 1):
        older = path.with_name(f"{path.name}.{index}")
        if os.path.lexists(older) and not older.is_file():
            return f"{older} is not a regular file", f"move {older} out of the way"
    return None


def _unfit_filesystem(path: Path) -> str | None:
    """Why files cannot be written on the filesystem holding ``path``, if it is plain."""
    try:
        fs = os.statvfs(path)
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if fs.f_flag & os.ST_RDONLY:
        return "is on a read-only filesystem"
    if fs.f_blocks == 0:  # /proc, /sys and their kind hold no files of ours
        return "is on a pseudo-filesystem (such as proc or sysfs) that holds no log files"
    return None


def lock_holders(path: Path) -> list[int]:
    """Pids holding a lock on ``path``, read from /proc/locks (taking nothing ourselves)."""
    try:
        st = path.stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    holders = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            pid = int(fields[4])
        except ValueError:
            continue
        if int(inode) == st.st_ino and os.makedev(int(major, 16), int(minor, 16)) == st.st_dev:
            holders.append(pid)
    return holders


LABELS = {"ok": "ok", "info": "info", "warn": "WARN", "action": "ACTION"}


def main(argv: list[str] | None = None) -> int:
    from tether.frontend.person.hosts import on_host

    # --host H: the same command, run on H over SSH (docs/hosts.md#a-fleet-seen-as-one).
    if (remote := on_host("doctor", sys.argv[2:] if argv is None else argv)) is not None:
        return remote
    parser = argparse.ArgumentParser(
        prog="tether doctor", description="Check this installation (versions, directories, "
        "guardians, sizes, usage log) and say what command fixes each problem. Exit status 1 "
        "when something needs action.")
    parser.add_argument("--host", help="run this on that host over SSH ([user@]host[:port], "
                        "as your ssh configuration knows it)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        config = Config.from_env()
    except ValueError as exc:
        print(f"tether doctor: {exc}", file=sys.stderr)
        return 1
    doctor = Doctor(config, dict(os.environ))
    asyncio.run(doctor.run())
    actions = [f for f in doctor.findings if f.level == "action"]
    if args.json:
        print(json.dumps({"findings": [asdict(f) for f in doctor.findings],
                          "needs_action": len(actions)}, indent=2))
    else:
        for finding in doctor.findings:
            # Findings quote paths and guardian.json fields, which agents can choose.
            print(f"{LABELS[finding.level]:<6}  {visible(finding.what)}")
            if finding.fix:
                print(f"        fix: {visible(finding.fix)}")
        print(f"\n{len(actions)} finding(s) need action." if actions else "\nnothing needs action.")
    return 1 if actions else 0
