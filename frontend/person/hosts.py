"""``tether hosts``: what a host reached over SSH has, installing Tether there, and the hosts
this user's front-ends know (docs/hosts.md#tether-hosts).

Also :func:`on_host`, which runs a person's command (``ls``, ``show``, ``tail``, ``attach``,
``doctor``) on the host where the guardian is, through the same master connection, so that
``--host H`` reads that host's guardians as the command reads this one's.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from tether.frontend.guardians.ssh_link import (
    INSTALL_DIR,
    SshLink,
    SshSettings,
    known_hosts,
)
from tether.frontend.person.connect import run_cli
from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.config import Config
from tether.shared.console import version
from tether.shared.ssh_target import SshHost

#: Seconds ``tether hosts install`` gives the host to build its venv (pip fetches packages).
INSTALL_TIMEOUT_S = 900.0
#: What of a source checkout an install carries to the host.
SOURCE_PARTS = ("pyproject.toml", "README.md", "protocol", "shared", "frontend", "guardian")

PYTHON_CHECK = """
py=$(command -v python3 2>/dev/null)
if [ -z "$py" ]; then echo "python="; exit 0; fi
echo "python=$py"
"$py" -c 'import sys; print("python_version=%d.%d.%d" % sys.version_info[:3])'
"""

INSTALL_SCRIPT = f"""
set -e
umask 077
dir="$HOME/{INSTALL_DIR}"
py=$(command -v python3 2>/dev/null) || {{ echo "no python3 on this host" >&2; exit 3; }}
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {{
  echo "python3 here is $("$py" --version 2>&1); Tether needs 3.11 or newer" >&2; exit 3; }}
src="$(dirname "$dir")/src"
rm -rf "$src"; mkdir -p "$src"
tar -xzf "$(dirname "$dir")/source.tar.gz" -C "$src"
[ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
"$dir/bin/python" -m pip install --disable-pip-version-check --quiet "$@" "$src" >&2
"$dir/bin/tether" --version
"""


def link_for(host: str, config: Config | None = None) -> SshLink:
    return SshLink(SshHost.parse(host), config or Config.from_env(), SshSettings.from_env())


def on_host(prog: str, argv: list[str]) -> int | None:
    """When ``argv`` holds ``--host H``: run ``tether PROG`` with the rest of it on host H
    (a terminal when this one has one) and return its exit status; else None."""
    if "--host" not in argv and not any(a.startswith("--host=") for a in argv):
        return None
    rest: list[str] = []
    host: str | None = None
    args = iter(argv)
    for arg in args:
        if arg == "--host":
            host = next(args, None)
        elif arg.startswith("--host="):
            host = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    if not host:
        print(f"tether {prog}: --host needs a host ([user@]host[:port])", file=sys.stderr)
        return 2
    try:
        link = link_for(host)
        asyncio.run(link.ensure())
    except TetherError as err:
        print(f"tether {prog}: {err.message} [{err.code.value}]", file=sys.stderr)
        return 2
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    return subprocess.call(link.command_argv(link.tether_argv([prog, *rest]), tty=tty))


async def check(host: str) -> dict[str, Any]:
    """What ``host`` has: SSH, Python 3.11 or newer, Tether and its version."""
    report: dict[str, Any] = {"host": host, "ok": False, "this_version": version()}
    link = link_for(host)
    try:
        await link.ensure()
    except TetherError as err:
        report["ssh"] = {"ok": False, "error": err.message}
        return report
    report["ssh"] = {"ok": True, "master_pid": link.master_pid}
    done = await link.run(["sh", "-c", PYTHON_CHECK], timeout_s=30, what="check")
    facts = dict(line.split("=", 1) for line in done.stdout.decode(errors="replace").splitlines()
                 if "=" in line)
    found = facts.get("python_version", "")
    parts = tuple(int(p) for p in found.split(".") if p.isdigit())
    report["python"] = {"ok": parts >= (3, 11), "path": facts.get("python") or None,
                        "version": found or None}
    try:
        far = await link.far_end(["remote", "check"], timeout_s=30)
    except TetherError as err:
        report["tether"] = {"ok": False, "error": err.message}
        return report
    report["tether"] = {"ok": far.get("version") == version(), "version": far.get("version"),
                        "python": far.get("python"), "executable": far.get("executable"),
                        "state_home": far.get("state_home"), "runtime_dir": far.get("runtime_dir")}
    report["ok"] = all(report[k]["ok"] for k in ("ssh", "python", "tether"))
    return report


def render_check(report: dict[str, Any]) -> str:
    lines = [f"host {report['host']}"]
    ssh = report["ssh"]
    lines.append(f"  ssh     {'ok' if ssh['ok'] else 'FAILED'}"
                 + (f" (master pid {ssh['master_pid']})" if ssh["ok"] else f": {ssh['error']}"))
    if "python" in report:
        py = report["python"]
        lines.append(f"  python  {py['version'] or 'missing'}"
                     + (f" at {py['path']}" if py["path"] else "")
                     + ("" if py["ok"] else " (Tether needs Python 3.11 or newer)"))
    if "tether" in report:
        tt = report["tether"]
        if "error" in tt:
            lines.append(f"  tether  MISSING: {tt['error']}")
        else:
            same = "same as here" if tt["ok"] else f"this front-end is {report['this_version']}"
            lines.append(f"  tether  {tt['version']} ({same}) at {tt['executable']}")
        if not tt["ok"]:
            lines.append(f"  -> `tether hosts install {report['host']}` installs this version")
    return "\n".join(lines)


def source_tree() -> Path:
    """The checkout this Tether runs from (what an install carries to a host)."""
    import tether.shared

    root = Path(next(iter(tether.shared.__path__))).resolve().parent
    if not all((root / part).exists() for part in SOURCE_PARTS):
        raise TetherError(ErrorCode.INVALID_REQUEST,
                          f"this Tether is not run from a source checkout ({root} lacks "
                          f"{', '.join(SOURCE_PARTS)}): install from one")
    return root


def source_archive(root: Path) -> bytes:
    buf = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = os.path.basename(info.name)
        return None if name == "__pycache__" or name.endswith(".pyc") else info

    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for part in SOURCE_PARTS:
            tar.add(root / part, arcname=part, filter=keep)
    return buf.getvalue()


async def install(host: str, pip_args: list[str]) -> int:
    link = link_for(host)
    archive = source_archive(source_tree())
    put = await link.run(["sh", "-c", f'umask 077; d="$HOME/{INSTALL_DIR}"; '
                          'mkdir -p "$(dirname "$d")" && cat > "$(dirname "$d")/source.tar.gz"'],
                         stdin=archive, timeout_s=120, what="install")
    if put.returncode != 0:
        print(put.stderr.decode(errors="replace"), file=sys.stderr, end="")
        return 1
    done = await link.run(["sh", "-c", INSTALL_SCRIPT, "sh", *pip_args],
                          timeout_s=INSTALL_TIMEOUT_S, what="install")
    if done.returncode != 0:
        print(done.stderr.decode(errors="replace"), file=sys.stderr, end="")
        print(f"tether hosts install: failed on {host} (exit status {done.returncode})",
              file=sys.stderr)
        return 1
    print(f"{host}: installed {done.stdout.decode(errors='replace').strip()} "
          f"in ~/{INSTALL_DIR}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether hosts",
                                     description="Hosts reached over SSH (ssh:// workspaces).")
    sub = parser.add_subparsers(dest="command", required=True)
    checked = sub.add_parser("check", help="what a host has: SSH, Python >= 3.11, Tether")
    checked.add_argument("host", help="[user@]host[:port], as your ssh configuration knows it")
    checked.add_argument("--json", action="store_true")
    put = sub.add_parser("install", help=f"install this Tether into ~/{INSTALL_DIR} there")
    put.add_argument("host")
    put.add_argument("--pip-arg", action="append", default=[],
                     help="an extra argument for pip there (repeatable), e.g. --no-index")
    listed = sub.add_parser("ls", help="the hosts this user's front-ends have reached")
    listed.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    async def body() -> int:
        if args.command == "check":
            report = await check(args.host)
            print(json.dumps(report, indent=2) if args.json else render_check(report))
            return 0 if report["ok"] else 1
        if args.command == "install":
            return await install(args.host, args.pip_arg)
        config = Config.from_env()
        hosts = [h.name for h in known_hosts(config.state_home)]
        if args.json:
            print(json.dumps(hosts))
        else:
            print("\n".join(hosts) if hosts else "no hosts (an ssh:// workspace adds its host)")
        return 0

    return run_cli("tether hosts", body)
