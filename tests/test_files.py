"""ReadFiles and EditFiles through ``tether serve`` over stdio, with a real guardian and real
files (docs/tools.md#readfiles, docs/tools.md#editfiles, docs/security.md#files)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.helpers import apoll, processes_with_env, start_guardian
from tests.mcp_helpers import bash, call, call_error, initialize, run
from tether.frontend.person.report import build_report
from tether.frontend.policy.authority import Caller, tools_for
from tether.frontend.transport.mcp_server import build_server
from tether.frontend.usage import read_shape_fields, temporary_fields
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

BIG_LINE = b"x" * 99 + b"\n"
BIG_LINES = 500_000  # 50 MB
KILL_LINES = 200_000  # 20 MB: written, fsynced and renamed while the guardian is killed


def _scope(session: dict[str, Any]) -> dict[str, Any]:
    return {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}


async def read(client: Client, session: dict[str, Any], *paths: str,
               temporary: bool = False) -> dict[str, Any]:
    result = await client.call_tool("ReadFiles", {**_scope(session), "paths": list(paths),
                                                  "temporary": temporary})
    content = result.structured_content
    assert content is not None and not result.is_error, result
    text = result.content[0].text  # type: ignore[union-attr]
    return {**content, "text": text}


async def edit(client: Client, session: dict[str, Any], edits: list[dict[str, Any]],
               error: bool = False, **extra: Any) -> dict[str, Any]:
    args = {**_scope(session), "edits": edits, **extra}
    return await (call_error if error else call)(client, "EditFiles", args)


async def test_reads_ranges_and_refuses_what_is_not_text(
        tether_env: Config, workspace: Path, tmp_path: Path) -> None:
    (workspace / "a.py").write_text("".join(f"line {n}\n" for n in range(1, 31)))
    (workspace / "blob.bin").write_bytes(b"ELF\0\0\x01binary")
    (workspace / "bad.txt").write_bytes(b"caf\xe9 ok\nsecond \xff\xfe line\n")
    with open(workspace / "big.log", "wb") as fh:
        fh.write(BIG_LINE * BIG_LINES)
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours\n")
    (workspace / "sub" / "escape").symlink_to(outside)
    log = tmp_path / "usage.jsonl"
    async with Client(stdio_params({"TETHER_USAGE_LOG": str(log)})) as client:
        session = await initialize(client, workspace)
        got = await read(client, session, "a.py", "a.py:10-20", "a.py:-5", "a.py:25-",
                         "a.py:28", "blob.bin", "big.log", "sub/escape", "bad.txt", "missing.py",
                         "a.py:40-")
        assert got["status"] == "completed_with_issues" and got["code"] == "file_read_issues"
        files = got["data"]["files"]
        whole, bounded, upto, tail, start = files[:5]
        assert whole["ok"] and whole["content"].startswith("line 1\n") and whole["total_lines"] == 30
        assert (bounded["start_line"], bounded["end_line"]) == (10, 20)
        assert bounded["content"] == "".join(f"line {n}\n" for n in range(10, 21))
        assert (upto["start_line"], upto["end_line"]) == (1, 5)
        assert (tail["start_line"], tail["end_line"]) == (25, 30)
        assert (start["start_line"], start["end_line"], start["total_lines"]) == (28, 30, 30)
        # one revision, bound to the content, whatever range was read
        assert len({f["revision"] for f in files[:5]}) == 1
        assert "    10\tline 10" in got["text"] and "    28\tline 28" in got["text"]
        binary, big, escape, bad, missing, past = files[5:]
        assert binary["error"]["code"] == "binary" and "content" not in binary
        assert big["error"]["code"] == "too_large" and big["total_lines"] == BIG_LINES
        suggested = big["error"]["suggested_range"]
        assert suggested.startswith("big.log:1-") and suggested in big["error"]["message"]
        assert escape["error"]["code"] == "denied" and "not yours" not in got["text"]
        assert bad["ok"] and bad["invalid_utf8"] is True and "\ufffd" in bad["content"]
        assert missing["error"]["code"] == "not_found"
        assert past["error"]["code"] == "invalid_request"
        # the range the error names is one that reads
        asked = await read(client, session, suggested)
        page = asked["data"]["files"][0]
        assert page["ok"] and page["content"].startswith("x" * 99) and page["revision"]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    counted = next(e for e in events if e["event"] == "tool_call" and e["tool"] == "ReadFiles")
    assert counted["read_request_schema"] == 1
    assert (counted["read_whole_file_requests"], counted["read_bounded_range_requests"],
            counted["read_open_ended_range_requests"]) == (6, 2, 3)
    assert "a.py" not in log.read_text() and "big.log" not in log.read_text()


async def test_edits_are_checked_against_the_revision_read(
        stdio_client: Client, workspace: Path) -> None:
    target = workspace / "app.py"
    target.write_text("def f():\n    return 1\n\ndef g():\n    return 1\n")
    os.chmod(target, 0o754)
    session = await initialize(stdio_client, workspace)
    first = (await read(stdio_client, session, "app.py"))["data"]["files"][0]
    # a person edits the file after the read
    target.write_text(target.read_text() + "# a person's line\n")
    before = target.read_bytes()
    stale = await edit(stdio_client, session, [{"path": "app.py", "revision": first["revision"],
                                               "content": "clobbered\n"}], error=True)
    assert stale["code"] == "stale_revision" and target.read_bytes() == before
    fresh = (await read(stdio_client, session, "app.py"))["data"]["files"][0]
    ambiguous = await edit(stdio_client, session, [{
        "path": "app.py", "revision": fresh["revision"],
        "blocks": [{"search": "    return 1\n", "replace": "    return 2\n"}]}], error=True)
    assert ambiguous["code"] == "search_ambiguous" and target.read_bytes() == before
    refused = ambiguous["data"]["files"][0]["error"]
    assert refused["lines"] == [2, 5] and "2, 5" in ambiguous["message"]
    nowhere = await edit(stdio_client, session, [{
        "path": "app.py", "revision": fresh["revision"],
        "blocks": [{"search": "def g():\n  return 1\n", "replace": "x"}]}], error=True)
    assert nowhere["code"] == "search_not_found"
    assert nowhere["data"]["files"][0]["error"]["nearest_lines"] == [4, 5]
    applied = await edit(stdio_client, session, [{
        "path": "app.py", "revision": fresh["revision"],
        "blocks": [{"search": "def g():\n    return 1\n", "replace": "def g():\n    return 2\n"}]},
        {"path": "new/../made.txt", "content": "created\n"}])
    changed, made = applied["data"]["files"]
    assert changed["action"] == "written" and changed["previous_revision"] == fresh["revision"]
    assert "+    return 2" in changed["diff"] and made["action"] == "created"
    assert target.read_text().endswith("def g():\n    return 2\n# a person's line\n")
    assert os.stat(target).st_mode & 0o7777 == 0o754  # mode kept
    assert (workspace / "made.txt").read_text() == "created\n"
    again = (await read(stdio_client, session, "app.py"))["data"]["files"][0]
    assert again["revision"] == changed["revision"]
    # overwriting needs a revision; only creating does not
    needs = await edit(stdio_client, session, [{"path": "made.txt", "content": "x\n"}],
                       error=True)
    assert needs["code"] == "revision_required" and (workspace / "made.txt").read_text() == "created\n"
    # a link out of the workspace is refused before anything is written
    (workspace / "out").symlink_to("/tmp")
    denied = await edit(stdio_client, session, [{"path": "out/tether-x", "content": "x"}],
                        error=True)
    assert denied["code"] == "denied" and not Path("/tmp/tether-x").exists()


async def test_a_guardian_killed_during_a_large_write_leaves_old_or_new(
        tether_env: Config, workspace: Path) -> None:
    target = workspace / "huge.txt"
    old = b"first line\n" + BIG_LINE * KILL_LINES
    new = b"FIRST LINE\n" + BIG_LINE * KILL_LINES
    target.write_bytes(old)
    async with Client(stdio_params()) as client:
        session = await initialize(client, workspace)
        killed_before_rename = False
        for _attempt in range(5):
            revision = (await read(client, session, "huge.txt:1-1"))["data"]["files"][0]["revision"]
            guardian = (await call(client, "Initialize", {
                "type": "status", **_scope(session)}))["data"]["guardian"]["pid"]
            args = {**_scope(session), "edits": [{
                "path": "huge.txt", "revision": revision,
                "blocks": [{"search": "first line\n", "replace": "FIRST LINE\n"}]}]}
            inode = target.stat().st_ino

            def writing(inode: int = inode) -> bool:  # its temporary file is there (or done)
                return (any(p.name.startswith(".huge.txt.tether-") for p in workspace.iterdir())
                        or target.stat().st_ino != inode)

            async with anyio.create_task_group() as group:
                group.start_soon(client.call_tool, "EditFiles", args)
                await apoll(writing, timeout=20, interval=0.001, what="the edit's temporary file")
                os.kill(guardian, signal.SIGKILL)
            content = target.read_bytes()
            assert content in (old, new), "a mix of the old file and the new one"
            if content == old:
                killed_before_rename = True
                break
            target.write_bytes(old)  # renamed just before the kill: try again
        assert killed_before_rename
        # the next call starts a new guardian, which reads the file as it is
        after = (await read(client, session, "huge.txt:1-1"))["data"]["files"][0]
        assert after["content"] == "first line\n" and after["total_lines"] == KILL_LINES + 1


async def test_modes_and_profiles_gate_edits(tether_env: Config, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / ".git").mkdir()
    (workspace / "src" / "ok.py").write_text("a = 1\n")
    (workspace / "src" / "sneaky.py").symlink_to(workspace / "other.py")
    (workspace / "other.py").write_text("b = 2\n")
    async with Client(stdio_params()) as client:
        session = await initialize(client, workspace)
        revision = (await read(client, session, "src/ok.py"))["data"]["files"][0]["revision"]
        await call(client, "Initialize", {"type": "change_mode", **_scope(session),
                                          "mode": "architect"})
        refused = await edit(client, session, [{"path": "src/ok.py", "revision": revision,
                                               "content": "a = 2\n"}], error=True)
        assert refused["code"] == "mode_denied" and refused["data"]["mode"] == "architect"
        assert (await read(client, session, "src/ok.py"))["data"]["files"][0]["ok"]
        await call(client, "Initialize", {
            "type": "change_mode", **_scope(session), "mode": "code_writer",
            "code_writer": {"allowed_commands": "all", "allowed_globs": ["src/**", "**/config"]}})
        for path in ("other.py", "src/sneaky.py", ".git/config"):
            denied = await edit(client, session, [{"path": path, "content": "x\n"}], error=True)
            assert denied["code"] == "mode_denied", denied
            assert denied["data"]["violations"][0]["rule"] == "allowed_globs"
        assert not (workspace / ".git" / "config").exists()
        assert (workspace / "other.py").read_text() == "b = 2\n"
        done = await edit(client, session, [{"path": "src/ok.py", "revision": revision,
                                            "content": "a = 2\n"}])
        assert done["data"]["applied"] and (workspace / "src" / "ok.py").read_text() == "a = 2\n"
    # A read-only principal (as `tether serve --profile read-only` makes one), in process.
    caller = Caller("local", "read-only", tools_for("read-only", ["Execution", "ReadFiles"]))
    async with Client(build_server(tether_env, local=caller)) as reader:
        listed = sorted(t.name for t in (await reader.list_tools()).tools)
        assert listed == ["Execution", "Initialize", "ReadFiles"]
        session = await initialize(reader, workspace)
        assert (await call_error(reader, "EditFiles", {**_scope(session), "edits": [
            {"path": "new.txt", "content": "x"}]}))["code"] == "tool_denied"
    assert not (workspace / "new.txt").exists()


async def test_release_keeps_helpers_in_use_and_never_another_threads(
        stdio_client: Client, workspace: Path) -> None:
    session = await initialize(stdio_client, workspace)
    tmp = Path(session["temporary_dir"])
    shown = await run(stdio_client, session, 'printf "%s" "$TETHER_TMP"')
    assert shown["output"].strip() == str(tmp)
    written = await edit(stdio_client, session, [{"path": "watch.log", "content": "one\n"},
                                                 {"path": "other.sh", "content": "echo\n"}],
                         temporary=True)
    usage = written["data"]["temporary"]
    assert (usage["files"], usage["over_budget"]) == (2, False) and usage["used_bytes"] == 9
    tail = await bash(stdio_client, session, {"type": "command", "is_background": True,
                                              "command": "tail -f $TETHER_TMP/watch.log"}, 0)

    async def release(names: list[str], reader: dict[str, Any] | None = None) -> dict[str, Any]:
        got = await read(stdio_client, reader or session, *names, temporary=True)
        generation = got["data"]["temporary"]["generation"]
        sent.append({**_scope(session), "release_temporary": [
            {"name": f["path"], "revision": f["revision"], "generation": generation}
            for f in got["data"]["files"]]})
        return await call(stdio_client, "EditFiles", sent[-1])

    sent: list[dict[str, Any]] = []

    def held() -> bool:
        for process in processes_with_env("TETHER_THREAD_ID", session["thread_id"]):
            try:
                if any(f.path == str(tmp / "watch.log") for f in process.open_files()):
                    return True
            except psutil.Error:
                continue
        return False

    await apoll(held, timeout=10, what="tail holding the helper open")
    kept = await release(["watch.log"])
    helper = kept["data"]["helpers"][0]
    assert kept["status"] == "completed_with_issues" and helper["status"] == "kept"
    assert helper["reason"] in ("open", "argv") and helper["pids"]
    assert (tmp / "watch.log").exists()
    await bash(stdio_client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                       "execution_id": tail["execution_id"]})
    for _ in range(50):
        done = await release(["watch.log"])
        if done["data"]["helpers"][0]["status"] == "released":
            break
        await anyio.sleep(0.1)
    assert done["status"] == "ok" and not (tmp / "watch.log").exists()
    again = await call(stdio_client, "EditFiles", sent[-1])  # a retry of the same request
    assert again["status"] == "ok" and again["data"]["helpers"][0]["status"] == "absent"
    # another thread can neither name nor reach this thread's helper
    other = await initialize(stdio_client, workspace)
    assert other["temporary_dir"] != session["temporary_dir"]
    got = await read(stdio_client, session, "other.sh", temporary=True)
    foreign = await call(stdio_client, "EditFiles", {**_scope(other), "release_temporary": [
        {"name": str(tmp / "other.sh"), "revision": got["data"]["files"][0]["revision"],
         "generation": got["data"]["temporary"]["generation"]}]})
    assert foreign["data"]["helpers"][0]["status"] == "refused"
    assert foreign["data"]["helpers"][0]["error"]["code"] == "denied"
    assert (tmp / "other.sh").exists()
    # a symlink a command leaves among the helpers leads nowhere
    await run(stdio_client, session, 'ln -s /etc/hostname "$TETHER_TMP/link"')
    linked = await read(stdio_client, session, "link", temporary=True)
    assert linked["data"]["files"][0]["error"]["code"] == "denied"


async def test_an_older_guardian_says_capability_missing(
        tether_env: Config, workspace: Path) -> None:
    start_guardian(workspace, tether_env, "1.8")
    (workspace / "a.txt").write_text("a\n")
    async with Client(stdio_params()) as client:
        session = await initialize(client, workspace)
        assert "temporary_dir" not in session
        missing = await call_error(client, "ReadFiles", {**_scope(session), "paths": ["a.txt"]})
        assert missing["code"] == "capability_missing"
        assert missing["data"]["capability"] == "files" and missing["data"]["input_sent"] is False
        refused = await call_error(client, "EditFiles", {**_scope(session), "edits": [
            {"path": "a.txt", "content": "b\n"}]})
        assert refused["code"] == "capability_missing"
    assert (workspace / "a.txt").read_text() == "a\n"


def test_the_usage_log_counts_request_shapes_and_the_report_sums_them() -> None:
    assert read_shape_fields(["a", "a", "a:1-2", "a:-3", "a:4-", "a:5", "a:x"]) == {
        "read_whole_file_requests": 3, "read_bounded_range_requests": 2,
        "read_open_ended_range_requests": 2}
    assert read_shape_fields(["a:0-1"]) == {} and read_shape_fields([]) == {}
    assert read_shape_fields("a.py") == {}  # not a list: unknown, never zero
    assert temporary_fields({"used_bytes": 0, "files": 0, "budget_bytes": 9,
                             "over_budget": False}) == {
        "temporary_usage_schema": 1, "temporary_used_bytes": 0, "temporary_files": 0,
        "temporary_budget_bytes": 9, "temporary_over_budget": False}
    assert temporary_fields({"used_bytes": "7", "over_budget": "no"}) == {}
    base = {"event": "tool_call", "usage_schema": 1, "tool": "ReadFiles", "action": "read",
            "backend": "native", "duration_ms": 1.0, "outcome": "ok", "code": None,
            "ts_unix_ms": 1, "read_request_schema": 1}
    lines = [json.dumps({**base, **read_shape_fields(["a", "b:1-2"]),
                         **temporary_fields({"over_budget": True})}),
             json.dumps(base)]
    group = next(g for g in build_report(lines, last=None, since_minutes=0, now_ms=0)
                 .to_dict()["workflows"] if g["tool"] == "ReadFiles")
    assert group["reads"]["whole_file"] == {"sum": 1, "calls_known": 1, "calls_unknown": 1}
    assert group["reads"]["bounded_range"]["sum"] == 1
    assert group["temporary_over_budget"] == {"true": 1}
