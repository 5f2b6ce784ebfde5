"""The Execution tool through the real MCP client (issue 3): paging, observe, wait, cursors,
retention."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import TextContent

from tests.agent_helpers import launch
from tests.conftest import stdio_params
from tests.helpers import apoll, guardian_thread
from tests.mcp_helpers import agent, bash, execution, initialize, read_pages, run
from tether.guardian.history.records import COMPACT_FIELDS, list_page, list_view
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import LIST_COMMAND_CHARS
from tether.protocol.method_table import WORKSPACE_LIST
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


async def test_read_pages_through_retained_output(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    seq = await run(client, session, "seq 1 300000", wait=30)
    assert seq["status"] == "exited" and seq["exit_code"] == 0
    full = "".join(f"{i}\r\n" for i in range(1, 300001)).encode()
    pages = await read_pages(client, session, seq["execution_id"], 65536)
    # The first 64 KiB, then the gap (reported on the page after it), then the last MiB.
    head = 64 * 1024
    assert pages[0]["start"] == 0 and "gap" not in pages[0]
    [after_gap] = [p for p in pages if "gap" in p]
    assert after_gap["start"] == len(full) - MIB
    assert after_gap["gap"] == len(full) - MIB - head
    for before, after in itertools.pairwise(pages):
        assert before["end"] == after["start"] or (before["end"], after) == (head, after_gap)
    assert all(p["end"] - p["start"] <= 65536 for p in pages)
    assert pages[-1]["end"] == len(full)
    split = pages.index(after_gap)
    head_text = "".join(p["text"] for p in pages[:split])
    assert head_text == full[:head].decode().replace("\r\n", "\n").rstrip("\r")
    assert "".join(p["text"] for p in pages[split:]) == full[-MIB:].decode().replace("\r\n", "\n")


async def test_a_long_results_tail_starts_at_a_whole_line_at_output_start(
    client: Client, workspace: Path,
) -> None:
    """The tail a command's result shows starts at ``output_start``, a line's first byte:
    paging up to there and the tail hold every line once (no half line, nothing between)."""
    session = await initialize(client, workspace)
    out = await run(client, session, "seq 1 30000", wait=30)
    lines = [str(i) for i in range(1, 30001)]
    line_ends = list(itertools.accumulate(len(n) + 2 for n in lines))  # each "n\r\n"
    assert out["output_truncated"] and out["output_end"] == line_ends[-1]
    assert out["output_start"] in line_ends
    first_shown = line_ends.index(out["output_start"]) + 1
    assert out["output"].splitlines() == lines[first_shown:]


async def test_a_list_of_long_commands_fits_and_pages(tether_env: Config, workspace: Path) -> None:
    """Listed records are short (the command's first LIST_COMMAND_CHARS characters, no
    screen): 128 records of 64 KiB commands made a reply over the frame limit, refused with
    limit_exceeded though the limit was legal, and nothing could list the older ones.
    ``next_before`` pages to them."""
    long = ": " + "z" * 65_000  # within the 64 KiB command limit
    async with Client(stdio_params()) as client:
        session = await initialize(client, workspace)
        ids = [(await bash(client, session, {"type": "command", "command": f"{long} {i}",
                                              "is_background": True}, wait=0))["execution_id"]
               for i in range(70)]
        newest_first = ids[::-1]
        listed = (await execution(client, session, {"type": "list", "limit": 128}))["data"]
        assert [r["execution_id"] for r in listed["executions"]] == newest_first
        assert "next_before" not in listed
        for record in listed["executions"]:
            assert record["command"] == long[:LIST_COMMAND_CHARS]
            assert record["command_truncated"] is True and "screen_text" not in record
        whole = (await execution(client, session, {"type": "get", "execution_id": ids[0]}))
        assert whole["data"]["execution"]["command"] == f"{long} 0"
        pages: list[list[str]] = []
        before = None
        while True:
            action: dict[str, Any] = {"type": "list", "limit": 30}
            if before is not None:
                action["before"] = before
            page = (await execution(client, session, action))["data"]
            pages.append([r["execution_id"] for r in page["executions"]])
            before = page.get("next_before")
            if before is None:
                break
        assert [len(p) for p in pages] == [30, 30, 10]
        assert list(itertools.chain(*pages)) == newest_first
        short = (await run(client, session, "echo short"))["execution_id"]
        first = (await execution(client, session, {"type": "list", "limit": 1}))["data"]
        [record] = first["executions"]
        assert record["execution_id"] == short and record["command"] == "echo short"
        assert "command_truncated" not in record and first["next_before"]
    # What still lists whole records (a person's workspace listing) is refused at once with
    # limit_exceeded when they outgrow a reply (it used to be dropped on the way and reported,
    # 12 s later, as a hung guardian to restart).
    async with guardian_thread(tether_env, workspace) as (handle, _):
        started = time.monotonic()
        with pytest.raises(TetherError) as refused:
            await handle.call(WORKSPACE_LIST, {"principal": "local",
                                                 "workspace_root": str(workspace),
                                                 "limit": 1000}, timeout_s=30)
        assert time.monotonic() - started < 5
    assert refused.value.code == ErrorCode.LIMIT_EXCEEDED
    assert "smaller limit" in refused.value.message
    assert refused.value.data["reply_bytes"] > refused.value.data["limit_bytes"]


async def test_pages_end_on_utf8_boundaries(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    out = await run(client, session, "python3 -c \"print('é' * 20000)\"", wait=20)
    pages = await read_pages(client, session, out["execution_id"], 1001)
    assert all(p["end"] - p["start"] <= 1001 for p in pages)
    text = "".join(p["text"] for p in pages)
    assert "\ufffd" not in text
    assert text.strip() == "é" * 20000


async def test_observe_rules_and_partial_results(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    a = await run(client, session, "echo alpha")
    b = await bash(client, session, {"type": "command", "command": "echo beta; sleep 30",
                                     "is_background": True})
    ok_items = [{"execution_id": a["execution_id"]}, {"execution_id": b["execution_id"]},
                {"execution_id": b["execution_id"], "source": "screen"}]

    async def rejected(items: list[dict[str, Any]]) -> dict[str, Any]:
        return await execution(client, session, {"type": "observe", "items": items},
                               expect_error=True)

    too_many = await rejected([{"execution_id": f"ex_{i}"} for i in range(33)])
    assert too_many["code"] == "limit_exceeded" and "1-32" in too_many["message"]
    dup = await rejected([ok_items[0], ok_items[0]])
    assert dup["data"]["rule"] == "observe_duplicate_item"
    small = await rejected([{"execution_id": a["execution_id"], "page_bytes": 3}])
    assert small["data"]["rule"] == "observe_page_bytes"
    budget = await rejected([{"execution_id": a["execution_id"], "page_bytes": 40000},
                             {"execution_id": b["execution_id"], "page_bytes": 30000}])
    assert budget["data"]["rule"] == "observe_total_budget" and "65536" in budget["message"]

    good = (await execution(client, session, {"type": "observe", "items": ok_items}))
    items = good["data"]["items"]
    assert [i["execution"]["execution_id"] for i in items] == [
        a["execution_id"], b["execution_id"], b["execution_id"]]
    assert "alpha" in items[0]["page"]["text"]
    assert isinstance(good["data"]["catalog_cursor"], int)
    # Each item's figures are those of the full record, live output figures included (asked
    # again until b's output is in and nothing moved between the two reads).
    deadline = time.monotonic() + 10
    while True:
        seen = (await execution(client, session, {"type": "observe", "items": ok_items[:2]}))
        compact = [item["execution"] for item in seen["data"]["items"]]
        full = [(await execution(client, session, {"type": "get", "execution_id": c[
            "execution_id"]}))["data"]["execution"] for c in compact]
        if compact[1]["output_end"] >= len("beta") and compact == [
                {k: record.get(k) for k in COMPACT_FIELDS} for record in full]:
            break
        assert time.monotonic() < deadline, (compact, full)
        await anyio.sleep(0.05)

    mixed = await execution(client, session, {"type": "observe", "items": [
        ok_items[0], {"execution_id": "ex_missing"}]})
    assert mixed["status"] == "completed_with_issues"
    assert mixed["code"] == "execution_observation_issues"
    assert "alpha" in mixed["data"]["items"][0]["page"]["text"]
    assert mixed["data"]["items"][1]["errors"][0]["stage"] == "read"


async def test_wait_timeout_and_exit(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    bg = await bash(client, session, {"type": "command", "command": "sleep 1; echo x",
                                      "is_background": True})
    started = time.monotonic()
    answer = await client.call_tool("Execution", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action": {"type": "wait", "execution_ids": [bg["execution_id"]], "timeout_seconds": 0,
                   "events": ["exited"]}})
    assert time.monotonic() - started < 0.5
    quick = answer.structured_content
    assert quick is not None and quick["data"]["outcome"] == "timeout"
    text = answer.content[0]
    assert isinstance(text, TextContent) and "nothing changed within 0s" in text.text
    waited = await execution(client, session, {
        "type": "wait", "execution_ids": [bg["execution_id"]], "timeout_seconds": 10,
        "events": ["exited"], "after": quick["data"]["cursor"]})
    assert waited["data"]["outcome"] == "changed"
    assert waited["data"]["changed"][0]["exit_code"] == 0


async def test_a_wait_on_what_has_already_ended_answers_at_once(
        client: Client, workspace: Path) -> None:
    """Without ``after`` the wait starts now, yet an execution that has ended can change no
    more: the reply says at once that it ended, with its exit code, not a timeout after the
    whole wait. Beside a running one, only the ended one is in ``changed``; with a cursor
    taken after the end nothing is new (the cursor's meaning is kept)."""
    session = await initialize(client, workspace)
    ended = await run(client, session, "(exit 3)")
    assert (ended["status"], ended["exit_code"]) == ("exited", 3)
    eid = ended["execution_id"]
    running = await bash(client, session, {"type": "command", "command": "sleep 30",
                                           "is_background": True})
    for events in (None, ["exited"], ["awaiting_input"]):
        action: dict[str, Any] = {"type": "wait", "execution_ids": [eid, running["execution_id"]],
                                  "timeout_seconds": 20}
        if events is not None:
            action["events"] = events
        started = time.monotonic()
        answer = await client.call_tool("Execution", {
            "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action": action})
        took = time.monotonic() - started
        content = answer.structured_content
        assert content is not None and content["ok"], content
        waited = content["data"]
        assert took < 5, f"{took:.1f}s for a wait on an ended execution ({events})"
        assert waited["outcome"] == "changed", waited
        (item,) = waited["changed"]
        assert (item["execution_id"], item["status"], item["exit_code"]) == (eid, "exited", 3)
        assert item["fired"] == ["exited"] and item["ended_before_wait"] is True
        text = answer.content[0]
        assert isinstance(text, TextContent)
        assert "exited 3" in text.text and "ended before the wait" in text.text, text.text
    later = await execution(client, session, {
        "type": "wait", "execution_ids": [eid, running["execution_id"]],
        "after": waited["cursor"], "timeout_seconds": 0})
    assert (later["data"]["outcome"], later["data"]["changed"]) == ("timeout", [])
    assert {r["execution_id"]: r["status"] for r in later["data"]["current"]} == {
        eid: "exited", running["execution_id"]: "running"}


async def test_cursors_are_bound_and_signed(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    one = await run(client, session, "seq 1 3000")
    two = await run(client, session, "seq 1 3000")
    page = (await execution(client, session, {"type": "read", "execution_id": one["execution_id"],
                                              "page_bytes": 100}))["data"]
    cursor = page["next_cursor"]
    edited = cursor[:5] + ("A" if cursor[5] != "A" else "B") + cursor[6:]
    for execution_id, source, bad in [(one["execution_id"], "output", edited),
                                      (one["execution_id"], "output", cursor + "="),
                                      (one["execution_id"], "output",
                                       cursor[:10] + "!!**" + cursor[10:]),
                                      (two["execution_id"], "output", cursor),
                                      (one["execution_id"], "screen", cursor)]:
        refused = await execution(client, session, {
            "type": "read", "execution_id": execution_id, "source": source, "cursor": bad},
            expect_error=True)
        assert refused["code"] == "invalid_cursor"


async def test_retention_keeps_128_records(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    for _ in range(129):
        await run(client, session, "true")
    running = await run(client, session, "sleep 30", wait=0)
    listed = (await execution(client, session, {"type": "list", "limit": 128}))["data"]
    records = listed["executions"]
    assert len(records) == 128
    assert records[0]["execution_id"] == running["execution_id"]
    assert records[0]["status"] == "running"


async def test_expired_records_of_an_idle_thread_are_pruned(
    tether_env: Config, workspace: Path,
) -> None:
    """A record 24 h past its end goes although its own thread sees no command and no list:
    work in another thread of the workspace prunes it, and its own thread then finds nothing
    (it used to be kept, and served, until its own thread ran a command or listed)."""
    catalog = guardian_paths(tether_env, "local", str(workspace)).catalog

    def row(execution_id: str) -> tuple[str, int | None] | None:
        with contextlib.closing(sqlite3.connect(catalog, timeout=10)) as db:
            found = db.execute("SELECT status, terminal_unix_ms FROM executions"
                               " WHERE execution_id = ?", (execution_id,)).fetchone()
        return None if found is None else (str(found[0]), found[1])

    def forgotten() -> bool:
        with contextlib.closing(sqlite3.connect(catalog, timeout=10)) as db:
            return db.execute("SELECT 1 FROM idempotency WHERE key = 'k-old'").fetchone() is None

    async with Client(stdio_params()) as client:
        idle = await initialize(client, workspace)
        busy = await initialize(client, workspace)
        # The idle thread's own prune, a moment after its one command, is done once it has
        # forgotten this day-old idempotency key: from then on nothing prunes that thread.
        with contextlib.closing(sqlite3.connect(catalog, timeout=10)) as db, db:
            db.execute("INSERT INTO idempotency VALUES ('local', 'k-old', 'm', 'f', 'null', 1)")
        old = (await run(client, idle, "echo old"))["execution_id"]
        await apoll(forgotten, what="the idle thread's own prune")
        assert row(old) is not None
        with contextlib.closing(sqlite3.connect(catalog, timeout=10)) as db, db:
            # As the clock would have it 25 h later (the end was written: nothing rewrites it).
            db.execute("UPDATE executions SET terminal_unix_ms = terminal_unix_ms - ?,"
                       " ended_unix_ms = ended_unix_ms - ? WHERE execution_id = ?",
                       (25 * 3600_000, 25 * 3600_000, old))
        kept = (await run(client, busy, "echo kept"))["execution_id"]
        deadline = time.monotonic() + 10
        while row(old) is not None:
            assert time.monotonic() < deadline, "the expired record was never pruned"
            await execution(client, busy, {"type": "get", "execution_id": "ex_missing"},
                            expect_error=True)  # any request of the workspace will do
            await anyio.sleep(0.1)
        gone = await execution(client, idle, {"type": "get", "execution_id": old},
                               expect_error=True)
        assert gone["code"] == "not_found"
        assert row(kept) is not None


def test_a_page_ends_before_its_records_outgrow_a_reply() -> None:
    """Records a listing does not cut (a managed agent's labels and argv) stop a page early,
    never below one record, with ``next_before`` where the next page starts."""
    records = [{"execution_id": f"ex_{seq}", "seq": seq, "command": "c",
                "labels": {"k": "v" * 1000}} for seq in (9, 8, 7, 6)]
    views, next_before = list_page(records, 3, lambda r: list_view(r, None), budget=2500)
    assert [v["execution_id"] for v in views] == ["ex_9", "ex_8"] and next_before == 8
    views, next_before = list_page(records, 3, lambda r: list_view(r, None), budget=10)
    assert [v["execution_id"] for v in views] == ["ex_9"] and next_before == 9
    views, next_before = list_page(records[:3], 3, lambda r: list_view(r, None))
    assert len(views) == 3 and next_before is None  # all there: nothing older
    views, next_before = list_page(records, 3, lambda r: list_view(r, None))
    assert len(views) == 3 and next_before == 7  # the fourth says older ones remain


async def test_observe_sees_what_get_and_read_see(stdio_client: Client, workspace: Path,
                                                  tmp_path: Path) -> None:
    """A managed agent belongs to its workspace, not to the thread that launched it: get,
    read and wait from another thread answer with it, and so does observe (it said
    not_found). Another thread's plain command stays not_found to all of them."""
    client = stdio_client
    launcher = await initialize(client, workspace)
    other = await initialize(client, workspace)
    agent_id = (await launch(client, launcher, tmp_path / "agent.log"))["execution_id"]
    command_id = (await run(client, launcher, "echo mine"))["execution_id"]
    await _until_recognized(client, other, agent_id, "awaiting_input")
    got = await execution(client, other, {"type": "get", "execution_id": agent_id})
    assert got["data"]["execution"]["execution_id"] == agent_id
    observed = await execution(client, other, {"type": "observe", "items": [
        {"execution_id": agent_id}, {"execution_id": agent_id, "source": "screen"}]})
    output, screen = observed["data"]["items"]
    assert (output["status"], screen["status"]) == ("ok", "ok"), observed
    assert output["execution"]["execution_id"] == agent_id and "page" in output
    assert "╭" in screen["page"]["text"]  # the fake agent's input box, drawn now
    refused = await execution(client, other, {"type": "observe", "items": [
        {"execution_id": command_id}, {"execution_id": command_id, "source": "screen"}]})
    assert [item["errors"][0]["code"] for item in refused["data"]["items"]] == [
        "not_found", "not_found"]
    await execution(client, other, {"type": "get", "execution_id": command_id},
                    expect_error=True)


async def test_recognition_after_a_catalog_cursor_counts_changes_from_the_wait_on(
    stdio_client: Client, workspace: Path, tmp_path: Path,
) -> None:
    """A catalog cursor carries no recognition state: an idle agent's awaiting_input is not a
    change since it (the wait answered 'changed' at once, every time); its next turn is."""
    client = stdio_client
    session = await initialize(client, workspace)
    eid = (await launch(client, session, tmp_path / "agent.log", "--busy-seconds", "2"))[
        "execution_id"]
    await _until_recognized(client, session, eid, "awaiting_input")
    catalog_cursor = (await execution(client, session, {"type": "list"}))["data"][
        "catalog_cursor"]
    idle = await execution(client, session, {
        "type": "wait", "execution_ids": [eid], "after": catalog_cursor,
        "events": ["awaiting_input"], "timeout_seconds": 1})
    assert (idle["data"]["outcome"], idle["data"]["changed"]) == ("timeout", [])
    await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "p1",
                                  "text": "work", "recognizer": "claude", "timeout_seconds": 0})
    await _until_recognized(client, session, eid, "busy")
    done = await execution(client, session, {
        "type": "wait", "execution_ids": [eid], "after": catalog_cursor,
        "events": ["awaiting_input"], "timeout_seconds": 15})
    assert done["data"]["outcome"] == "changed"
    assert done["data"]["changed"][0]["fired"] == ["awaiting_input"]


async def _until_recognized(client: Client, session: dict[str, Any], execution_id: str,
                            state: str, timeout: float = 15.0) -> None:
    """Poll ``Execution.explain`` until the execution's screen is recognised as ``state``."""
    deadline = time.monotonic() + timeout
    while True:
        record = (await execution(client, session, {"type": "explain",
                                                    "execution_id": execution_id}))["data"]
        if record["recognition"]["state"] == state:
            return
        assert time.monotonic() < deadline, f"{execution_id} never became {state}: {record}"
        await anyio.sleep(0.05)


async def test_only_ascii_digits_are_a_catalog_cursor(stdio_client: Client,
                                                       workspace: Path) -> None:
    """str.isdigit() holds for "²" (int() then raised: internal_error) and for "٣" (taken
    as catalog cursor 3): neither came from Tether, so both are invalid_cursor."""
    client = stdio_client
    session = await initialize(client, workspace)
    eid = (await run(client, session, "echo x"))["execution_id"]
    for after in ("²", "٣", "１"):
        refused = await execution(client, session, {
            "type": "wait", "execution_ids": [eid], "after": after, "timeout_seconds": 0},
            expect_error=True)
        assert refused["code"] == "invalid_cursor", (after, refused)
    catalog_cursor = (await execution(client, session, {"type": "list"}))["data"]["catalog_cursor"]
    for after in (catalog_cursor, str(catalog_cursor)):
        waited = await execution(client, session, {
            "type": "wait", "execution_ids": [eid], "after": after, "timeout_seconds": 0})
        assert waited["data"]["outcome"] == "timeout"
