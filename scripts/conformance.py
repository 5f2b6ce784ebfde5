"""Run the official MCP conformance suite's server scenarios against ``tether serve --http``.

The suite (npm ``@modelcontextprotocol/conformance``, its 0.2 line) connects without an
``Authorization`` header, and Tether refuses any HTTP request without a bearer token. So
this starts ``tether serve --http`` with a throwaway principals file and its own
``TETHER_HOME``/``TETHER_RUNTIME_DIR``, puts a small proxy in front of it that adds the
token to each request (and changes nothing else: header bytes, bodies and streamed replies
pass through as they are, so the suite's whitespace and header checks reach Tether
unaltered), and runs the suite against the proxy. Tether listens on 127.0.0.3 (a loopback
address) and the proxy on 127.0.0.1 at the same port: the Host header the suite sends then
names a loopback name and port Tether allows, as its DNS-rebinding check wants, and the
suite's own DNS-rebinding scenario (which needs a loopback URL) can run.

    scripts/conformance [--suite-dir DIR] [--node NODE] [--scenario NAME ...] [SUITE OPTIONS]

Options it does not know (``--suite all``, ``--spec-version 2026-07-28``, ``--verbose``) go
to the suite's ``server`` command as they are.

Not part of the test suite: it needs node and npm (see docs/development.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_SUITE_DIR = Path("/tmp/conf")
HEAD_END = b"\r\n\r\n"
MAX_HEAD = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        writer.write_eof()


async def _requests(client: asyncio.StreamReader, upstream: asyncio.StreamWriter,
                    auth_line: bytes) -> None:
    """Copy the client's requests upstream, one by one, each with ``auth_line`` added
    after its request line (a request that already has Authorization keeps its own)."""
    with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError,
                             asyncio.LimitOverrunError):
        while True:
            head = await client.readuntil(HEAD_END)
            first, _, rest = head.partition(b"\r\n")
            lines = rest[: -len(HEAD_END)].split(b"\r\n") if rest != b"\r\n" else []
            names = [line.split(b":", 1)[0].strip().lower() for line in lines if line]
            extra = b"" if b"authorization" in names else auth_line
            upstream.write(first + b"\r\n" + extra + rest)
            length = 0
            chunked = False
            for line in lines:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
                elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value.lower():
                    chunked = True
            if chunked:
                await _copy_chunked(client, upstream)
            elif length:
                upstream.write(await client.readexactly(length))
            await upstream.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        upstream.write_eof()


async def _copy_chunked(client: asyncio.StreamReader, upstream: asyncio.StreamWriter) -> None:
    while True:
        size_line = await client.readuntil(b"\r\n")
        upstream.write(size_line)
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (trailer := await client.readuntil(b"\r\n")) != b"\r\n":
                upstream.write(trailer)
            upstream.write(b"\r\n")
            return
        upstream.write(await client.readexactly(size + 2))


PROXY_HOST = "127.0.0.1"
TETHER_HOST = "127.0.0.3"


async def proxy(upstream_port: int, token: str, ready: asyncio.Event) -> None:
    auth_line = f"Authorization: Bearer {token}\r\n".encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(TETHER_HOST, upstream_port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_requests(reader, up_writer, auth_line),
                                 _pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # shutting down: Python 3.11's stream server prints a cancelled handler's trace
        finally:
            up_writer.close()
            writer.close()

    server = await asyncio.start_server(serve, PROXY_HOST, upstream_port, limit=MAX_HEAD)
    ready.set()
    async with server:
        await server.serve_forever()


def _start_tether(work: Path, token: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    principals = work / "principals.toml"
    principals.write_text(f'[[principal]]\nid = "conformance"\ntoken = "{token}"\n'
                          'profile = "full"\n')
    principals.chmod(0o600)
    log = work / "serve.log"
    env = {**os.environ, "TETHER_HOME": str(work / "home"),
           "TETHER_RUNTIME_DIR": str(work / "run")}
    tether = Path(sys.executable).with_name("tether")
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [str(tether), "serve", "--http", "--host", TETHER_HOST, "--port", "0",
             "--principals", str(principals)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    for _ in range(600):  # 30 s: a start on a loaded 2-core machine took over 10
        found = re.search(r"at http://127\.0\.0\.3:(\d+)/mcp", log.read_text())
        if found:
            return proc, int(found.group(1)), log
        if proc.poll() is not None:
            break
        subprocess.run(["sleep", "0.05"], check=False)
    proc.kill()
    raise SystemExit(f"tether serve --http did not start:\n{log.read_text()}")


async def _run(args: argparse.Namespace) -> int:
    token = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="tether-conformance-") as tmp:
        work = Path(tmp)
        proc, upstream, log = _start_tether(work, token)
        ready = asyncio.Event()
        proxied = asyncio.create_task(proxy(upstream, token, ready))
        try:
            await asyncio.wait([proxied, asyncio.create_task(ready.wait())],
                               return_when=asyncio.FIRST_COMPLETED)
            if proxied.done():
                proxied.result()  # the proxy could not listen: say why
            url = f"http://{PROXY_HOST}:{upstream}/mcp"
            print(f"tether at {TETHER_HOST}:{upstream}, proxy with the bearer token at {url}",
                  file=sys.stderr)
            entry = args.suite_dir / "node_modules/@modelcontextprotocol/conformance/dist/index.js"
            statuses = []
            for scenario in args.scenario or [None]:
                command = [args.node, str(entry), "server", "--url", url]
                if scenario:
                    command += ["--scenario", scenario]
                if args.output:
                    command += ["-o", str(args.output)]
                command += args.passed
                child = await asyncio.create_subprocess_exec(*command)
                statuses.append(await child.wait())
            return max(statuses)
        finally:
            proxied.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await proxied
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if args.keep_log:
                print(log.read_text(), file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None,
                                     allow_abbrev=False)  # --suite is the suite's
    parser.add_argument("--suite-dir", type=Path, default=DEFAULT_SUITE_DIR,
                        help="where `npm install --prefix DIR @modelcontextprotocol/"
                        "conformance@0.2.0-alpha.12` put the suite (default: /tmp/conf)")
    parser.add_argument("--node", default="node", help="node 22 or later (default: node)")
    parser.add_argument("--scenario", action="append",
                        help="one scenario (repeatable; default: the suite's active set)")
    parser.add_argument("-o", "--output", type=Path, help="the suite's result directory")
    parser.add_argument("--keep-log", action="store_true",
                        help="print tether serve's log at the end")
    args, passed = parser.parse_known_args()
    args.passed = passed  # the rest goes to the suite as it is
    return asyncio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())
