"""The short-command path of the guardian: fewer commits, no read-backs, the final screen of a
main-shell command drawn after the reply — with every promise of the slower path kept."""

from __future__ import annotations

import asyncio
import shlex
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.helpers import guardian_thread, poll
from tether.frontend.guardians.locator import GuardianHandle
from tether.guardian.history.idempotency import IdempotencyLedger
from tether.guardian.history.journal import Journal, SpareFile
from tether.guardian.history.retention import Retention, RetentionLimits
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.notify import ChangeNotifier
from tether.guardian.runtime.pty import ExitStatus
from tether.guardian.runtime.recovery import recovery_advice
from tether.guardian.runtime.shell import MainShell
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import EXEC_GET, EXEC_LIST, EXEC_START
from tether.protocol.methods import ExecStartParams
from tether.protocol.results import ExecResult, ExecutionRecord
from tether.shared.config import Config
from tether.shared.paths import GuardianPaths, guardian_paths
from tether.shared.segments import segment_path
from tether.shared.store import checkpointer as checkpointer_module
from tether.shared.store import core as core_module
from tether.shared.store.catalog import Catalog

pytestmark = pytest.mark.anyio


def _params(command: str = "echo hi") -> ExecStartParams:
    return ExecStartParams.model_validate({
        "principal": "local", "workspace_root": "/w", "thread_id": "th_0123456789abcdef",
        "command": command, "idempotency_key": "k1"})


def _record(execution_id: str) -> dict[str, Any]:
    return {"execution_id": execution_id, "principal": "local", "workspace_root": "/w",
            "thread_id": "th", "kind": "command", "command": "true", "status": "running",
            "started_unix_ms": 1, "guardian_instance_id": "g",
            "runtime": {"pid": 1, "create_time": 2.5}}


# -- the idempotency key and the record in one commit ---------------------------------------


async def test_a_repeat_before_the_claim_is_delivery_unknown_and_types_nothing(
        tmp_path: Path) -> None:
    ledger = IdempotencyLedger(Catalog(tmp_path / "c.sqlite3"))
    params = _params()
    ready = asyncio.Event()
    typed: list[str] = []

    async def first(claim: Any) -> dict[str, Any]:
        await ready.wait()  # a shell still starting: the key is looked up, not yet claimed
        claim()
        typed.append("first")
        return {"execution_id": "ex_1", "input_sent": True}

    async def again(claim: Any) -> dict[str, Any]:
        claim()
        typed.append("again")
        return {"execution_id": "ex_2", "input_sent": True}

    task = asyncio.ensure_future(ledger.once_claiming("local", "k1", "exec.start", params, first))
    await asyncio.sleep(0)
    with pytest.raises(TetherError) as unknown:
        await ledger.once_claiming("local", "k1", "exec.start", params, again)
    assert unknown.value.code == ErrorCode.DELIVERY_UNKNOWN
    with pytest.raises(TetherError) as conflict:  # other params: a conflict, as with a row
        await ledger.once_claiming("local", "k1", "exec.start", _params("ls"), again)
    assert conflict.value.code == ErrorCode.IDEMPOTENCY_CONFLICT
    ready.set()
    assert (await task)["execution_id"] == "ex_1"
    replay = await ledger.once_claiming("local", "k1", "exec.start", params, again)
    assert replay == {"execution_id": "ex_1", "input_sent": True, "replayed": True}
    assert typed == ["first"]


async def test_a_claim_whose_commit_fails_leaves_no_key_and_a_crash_after_it_leaves_delivering(
        tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.sqlite3")
    ledger = IdempotencyLedger(catalog)
    params = _params()

    async def insert_fails(claim: Any) -> dict[str, Any]:
        with catalog.transaction():
            claim()
            catalog.insert_execution({"execution_id": "ex_1"})  # NOT NULL columns missing
        raise AssertionError("not reached")

    with pytest.raises(sqlite3.IntegrityError):
        await ledger.once_claiming("local", "k1", "exec.start", params, insert_fails)
    # Rolled back together: no key, no record, nothing typed; a repeat may deliver.
    assert catalog.idempotent_result("local", "k1") is None
    assert catalog.get_execution("ex_1") is None

    async def dies_after_commit(claim: Any) -> dict[str, Any]:
        with catalog.transaction():
            claim()
            catalog.insert_execution(_record("ex_1"))
        raise RuntimeError("the guardian died here, between the commit and the outcome")

    with pytest.raises(RuntimeError):
        await ledger.once_claiming("local", "k1", "exec.start", params, dies_after_commit)
    assert catalog.get_execution("ex_1") is not None
    with pytest.raises(TetherError) as unknown:  # a later guardian on the same catalog
        await IdempotencyLedger(catalog).once_claiming(
            "local", "k1", "exec.start", params, dies_after_commit)
    assert unknown.value.code == ErrorCode.DELIVERY_UNKNOWN
    assert unknown.value.data["input_sent"] == "unknown"


async def test_a_deliverer_that_never_claims_records_no_outcome(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.sqlite3")

    async def forgets(claim: Any) -> dict[str, Any]:
        return {"execution_id": "ex_1", "input_sent": True}

    with pytest.raises(AssertionError):
        await IdempotencyLedger(catalog).once_claiming("local", "k1", "exec.start", _params(),
                                                       forgets)
    assert catalog.idempotent_result("local", "k1") is None


async def test_an_outcome_rides_with_the_next_commit_and_is_seen_at_once(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.sqlite3")
    other = Catalog(tmp_path / "c.sqlite3")  # what another process (or a later guardian) reads
    ledger = IdempotencyLedger(catalog)
    params = _params()

    async def deliver(claim: Any) -> dict[str, Any]:
        with catalog.transaction():
            claim()
            catalog.insert_execution(_record("ex_1"))
        return {"execution_id": "ex_1", "input_sent": True}

    await ledger.once_claiming("local", "k1", "exec.start", params, deliver)
    stored = other.idempotent_result("local", "k1")
    assert stored is not None and stored[2] == {"state": "delivering"}  # not written yet
    replay = await ledger.once_claiming("local", "k1", "exec.start", params, deliver)
    assert replay["replayed"] is True and replay["execution_id"] == "ex_1"
    # A guardian that died now leaves `delivering`: its repeat is unknown, never typed again.
    with pytest.raises(TetherError) as unknown:
        await IdempotencyLedger(other).once_claiming("local", "k1", "exec.start", params, deliver)
    assert unknown.value.code == ErrorCode.DELIVERY_UNKNOWN
    # A commit that fails keeps it waiting; the next one (the command's end) writes it.
    with pytest.raises(ValueError), catalog.transaction():
        raise ValueError("rolled back")
    assert other.idempotent_result("local", "k1")[2] == {"state": "delivering"}  # type: ignore[index]
    catalog.update_execution_or_keep("ex_1", status="exited", exit_code=0)
    assert other.idempotent_result("local", "k1")[2] == {  # type: ignore[index]
        "execution_id": "ex_1", "input_sent": True}


async def test_an_outcome_with_no_commit_to_ride_is_written_shortly(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.sqlite3")
    other = Catalog(tmp_path / "c.sqlite3")
    ledger = IdempotencyLedger(catalog)

    async def deliver(claim: Any) -> dict[str, Any]:
        claim()
        return {"execution_id": "ex_1", "input_sent": True}

    await ledger.once_claiming("local", "k1", "exec.start", _params(), deliver)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while other.idempotent_result("local", "k1")[2] != {  # type: ignore[index]
            "execution_id": "ex_1", "input_sent": True}:
        assert loop.time() < deadline, "the outcome was never written"
        await asyncio.sleep(0.01)
    catalog.close()


# -- the catalog writes an end without reading it back --------------------------------------


@pytest.mark.parametrize("returning", [True, False], ids=["returning", "sqlite-before-3.35"])
def test_records_returned_by_writes_are_the_records_read_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, returning: bool) -> None:
    monkeypatch.setattr(core_module, "RETURNING", returning)
    catalog = Catalog(tmp_path / "c.sqlite3")
    inserted = catalog.insert_execution(_record("ex_1"))
    assert inserted == catalog.get_execution("ex_1")
    assert list(inserted) == list(catalog.get_execution("ex_1") or {})  # column order too
    end = {"status": "exited", "exit_code": 0, "ended_unix_ms": 5, "output_end": 3}
    # Written against the inserted record (only the written columns are read)...
    assert catalog.write_execution_or_keep("ex_1", last_read=inserted, **end) == (
        True, catalog.get_execution("ex_1"))
    # ...and against a stale one: someone else wrote the row since, so it is read whole.
    catalog.insert_execution(_record("ex_2"))
    stale = catalog.get_execution("ex_2")
    catalog.update_execution("ex_2", labels={"set": "elsewhere"})
    written, record = catalog.write_execution_or_keep("ex_2", last_read=stale, **end)
    assert record == catalog.get_execution("ex_2")
    assert record is not None and record["labels"] == {"set": "elsewhere"}
    written, record = catalog.write_execution_or_keep(
        "ex_1", status="exited", exit_code=0, ended_unix_ms=6, output_end=3,
        runtime={"pid": 1, "create_time": 2.5, "orphan": {"pid": 1}}, output_pending=1,
        screen_text="hi")
    assert written
    assert record == catalog.get_execution("ex_1")
    assert record is not None and record["output_pending"] is True
    # Nothing changed: nothing written, the same record.
    seq = catalog.change_seq()
    assert catalog.write_execution_or_keep("ex_1", status="exited") == (True, record)
    assert catalog.change_seq() == seq


def test_a_staged_end_is_read_at_once_and_persisted_with_the_next_commit(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.sqlite3")
    other = Catalog(tmp_path / "c.sqlite3")  # another process, or the next guardian
    inserted = catalog.insert_execution(_record("ex_1"))
    seq = catalog.change_seq()
    end = {"status": "exited", "exit_code": 0, "ended_unix_ms": 5, "output_end": 3}
    staged = catalog.stage_execution("ex_1", last_read=inserted, **end)
    # This catalog object shows the end at once, as the record the write will make...
    assert staged == catalog.get_execution("ex_1")
    assert staged is not None and staged["status"] == "exited"
    assert [r["status"] for r in catalog.list_executions("th", 5)] == ["exited"]
    # ...but nothing is persisted, and catalog cursors (persisted changes) have not moved.
    assert other.get_execution("ex_1")["status"] == "running"  # type: ignore[index]
    assert catalog.change_seq() == seq
    # A commit that fails keeps it staged; the next one writes it, with what it writes.
    with pytest.raises(ValueError), catalog.transaction():
        raise ValueError("rolled back")
    assert other.get_execution("ex_1")["status"] == "running"  # type: ignore[index]
    assert catalog.update_execution_or_keep("ex_1", screen_text="drawn")
    written = other.get_execution("ex_1")
    assert written is not None and catalog.change_seq() == seq + 1  # one commit for both
    assert {k: written[k] for k in (*end, "screen_text")} == {**end, "screen_text": "drawn"}
    assert written["observed_at_unix_ms"] == staged["observed_at_unix_ms"]  # as replied
    assert catalog.get_execution("ex_1") == written
    assert catalog.stage_execution("ex_missing", last_read=None, status="exited") is None


def test_a_staged_update_goes_out_over_an_older_kept_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = Catalog(tmp_path / "c.sqlite3")
    catalog.insert_execution(_record("ex_1"))
    write = catalog._write_execution

    def full_disk(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(catalog, "_write_execution", full_disk)
    assert not catalog.update_execution_or_keep("ex_1", output_end=5)  # kept in memory
    monkeypatch.setattr(catalog, "_write_execution", write)
    catalog.stage_execution("ex_1", last_read=None, output_end=10)
    with catalog.transaction():  # another commit writes what is staged
        catalog.insert_execution(_record("ex_2"))
    assert catalog.get_execution("ex_1")["output_end"] == 10  # type: ignore[index]
    assert catalog.write_kept()  # nothing older is left to write over it
    assert Catalog(tmp_path / "c.sqlite3").get_execution("ex_1")["output_end"] == 10  # type: ignore[index]


async def test_whichever_commit_writes_a_staged_end_wakes_the_waiters(tmp_path: Path) -> None:
    # A waiter that found the end staged, not persisted, sleeps until a commit writes it:
    # the end's own, or another that it rides along with (here, the next command's insert).
    catalog = Catalog(tmp_path / "c.sqlite3")
    notifier = ChangeNotifier()
    catalog.on_staged_written = notifier.notify
    inserted = catalog.insert_execution(_record("ex_1"))
    catalog.stage_execution("ex_1", last_read=inserted, status="exited", exit_code=0)
    waiter = asyncio.ensure_future(notifier.wait(10, output=False))
    await asyncio.sleep(0)
    assert not waiter.done()
    with catalog.transaction():
        catalog.insert_execution(_record("ex_2"))
    assert await asyncio.wait_for(waiter, 5) is True
    assert Catalog(tmp_path / "c.sqlite3").get_execution("ex_1")["status"] == "exited"  # type: ignore[index]


# -- a main shell's final screen, drawn after the end ---------------------------------------


class _Listener:
    def command_finished(self, live: LiveExecution, exit_code: int | None) -> None: ...

    def shell_exited(self, shell: MainShell, status: ExitStatus) -> None: ...

    def command_discarded(self, live: LiveExecution) -> None: ...

    def marker_ignored(self, live: LiveExecution, detail: str) -> None: ...

    def output_arrived(self) -> None: ...


async def test_a_deferred_draw_runs_before_the_screen_takes_more_output(tmp_path: Path) -> None:
    shell = MainShell(thread_id="th", generation=1, cwd=str(tmp_path), env={},
                      scratch=tmp_path, rows=5, cols=40, listener=_Listener())
    try:
        drawn: list[str] = []
        shell.screen.feed(b"first command's output")
        shell.defer_draw(lambda: drawn.append(shell.screen.snapshot().text))
        shell._on_output(b"\r\nLATER")  # output before the next loop turn (a background job)
        assert drawn == ["first command's output"]
        await asyncio.sleep(0)
        assert len(drawn) == 1  # drawn once
        shell.defer_draw(lambda: drawn.append("second"))
        await asyncio.sleep(0)  # with nothing arriving it runs on the next loop turn
        assert drawn[-1] == "second"
    finally:
        shell.close()


async def test_a_draw_run_by_arriving_output_writes_on_the_next_loop_turn(
        tmp_path: Path) -> None:
    # The PTY reader only appends: the draw reads the screen there, its write waits.
    shell = MainShell(thread_id="th", generation=1, cwd=str(tmp_path), env={},
                      scratch=tmp_path, rows=5, cols=40, listener=_Listener())
    try:
        written: list[str] = []
        shell.screen.feed(b"before")

        def draw() -> Any:
            text = shell.screen.snapshot().text
            return lambda: written.append(text)

        shell.defer_draw(draw)
        shell._on_output(b" after")
        assert written == []
        await asyncio.sleep(0)
        assert written == ["before"]
        shell.defer_draw(draw)
        shell.resize(6, 40)  # anywhere else the write follows the draw at once
        assert written == ["before", "before after"]
    finally:
        shell.close()


async def _echo(handle: GuardianHandle, scope: dict[str, Any], word: str) -> ExecResult:
    """``echo word`` in the thread's shell, answered once it ended."""
    done: ExecResult = await handle.call(EXEC_START, {
        **scope, "command": f"echo {word}", "idempotency_key": word, "wait_ms": 5000},
        timeout_s=10)
    assert (done.execution.status, done.execution.exit_code) == ("exited", 0)
    return done


async def test_a_main_shell_command_gets_its_screen_text_after_its_end(
        tether_env: Config, workspace: Path) -> None:
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        ids = []
        for word in ("alpha-one", "beta-two"):
            done = await _echo(handle, scope, word)
            assert done.output.text.strip() == word
            ids.append(done.execution.execution_id)

        async def screen_of(execution_id: str) -> str:
            got = await handle.call(EXEC_GET, {**scope, "execution_id": execution_id},
                                    timeout_s=10)
            return str(got.execution.screen_text or "")

        # The reply goes out as the guardian built it, unchecked there: it is what the
        # front-end's model reads (every field of the record, none it does not know).
        raw = await handle.client.call("exec.start", {
            **scope, "command": "echo gamma", "idempotency_key": "gamma", "wait_ms": 5000},
            timeout_s=10)
        assert ExecResult.model_validate(raw).wire() == raw
        assert set(raw["execution"]) <= set(ExecutionRecord.model_fields)
        assert (raw["execution"]["status"], raw["output"]["text"].strip()) == ("exited", "gamma")
        first, second = await screen_of(ids[0]), await screen_of(ids[1])
        # Each record keeps the screen as its command left it: the next command's line and
        # output came after that draw.
        assert "alpha-one" in first and "beta-two" not in first
        assert "alpha-one" in second and "beta-two" in second


async def test_an_answered_end_is_written_with_its_screen_while_the_guardian_idles(
        tether_env: Config, workspace: Path) -> None:
    # The reply comes first; the end and the final screen reach the file a moment later
    # (the draw a loop turn after the reply) with no further request, in one commit.
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        done = await _echo(handle, scope, "idle-draw")
        reader = Catalog(guardian_paths(tether_env, "local", str(workspace)).catalog)

        def written() -> bool:
            record = reader.get_execution(done.execution.execution_id)
            return (record is not None and record["status"] == "exited"
                    and "idle-draw" in str(record["screen_text"]))

        poll(written, what="the end and its screen on disk")  # the guardian is another process
        record = reader.get_execution(done.execution.execution_id)
        assert record is not None
        assert record["observed_at_unix_ms"] == done.execution.observed_at_unix_ms  # as replied
        # A request that comes next finds the end written: a listing's catalog cursor counts
        # the end it shows.
        again = await _echo(handle, scope, "listed")
        listed = await handle.call(EXEC_LIST, {**scope, "limit": 1}, timeout_s=10)
        assert listed.executions[0].execution_id == again.execution.execution_id
        stored = reader.get_execution(again.execution.execution_id)
        assert stored is not None and stored["status"] == "exited"
        assert stored["change_seq"] <= listed.catalog_cursor
        reader.close()


async def test_each_command_takes_the_spare_journal_file_and_the_next_is_made_after_its_reply(
        tether_env: Config, workspace: Path) -> None:
    journals = guardian_paths(tether_env, "local", str(workspace)).journals
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        spare = journals / SpareFile.NAME
        assert spare.exists()  # made when the guardian started
        inode = spare.stat().st_ino
        done = await _echo(handle, scope, "spare-one")
        first = segment_path(journals, done.execution.execution_id, 0)
        assert first.read_bytes().strip() == b"spare-one"
        assert first.stat().st_ino == inode  # the spare, renamed
        poll(spare.exists, what="the next spare, made after the reply")
        inode = spare.stat().st_ino
        again = await _echo(handle, scope, "spare-two")
        assert segment_path(journals, again.execution.execution_id, 0).stat().st_ino == inode


# -- journals -------------------------------------------------------------------------------


def test_opening_the_journal_file_early_keeps_what_was_appended(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "ex_1", new=True)
    journal.append(b"already here")
    journal.open()  # already open: nothing changes
    assert Journal(tmp_path, "ex_1").read(0, 100) == b"already here"
    early = Journal(tmp_path, "ex_2", new=True)
    early.open()
    fresh = Journal(tmp_path, "ex_2")  # the file is there, empty
    assert (fresh.start, fresh.end) == (0, 0)
    early.append(b"new")
    assert Journal(tmp_path, "ex_2").read(0, 100) == b"new"
    # A directory that refuses the file: the append holds the bytes, as for a full disk.
    refused = Journal(tmp_path / "missing", "ex_3", new=True)
    refused.open()
    assert refused.write_error is not None
    refused.append(b"held")
    assert (refused.unwritten, refused.read(0, 10)) == (4, b"held")


def test_a_journal_takes_the_spare_file_made_ahead(tmp_path: Path) -> None:
    spare = SpareFile(tmp_path)
    taken = Journal(tmp_path, "ex_1", new=True)
    taken.open(spare)  # no spare yet: a file of its own
    assert segment_path(tmp_path, "ex_1", 0).exists() and not spare.path.exists()
    spare.refill()
    spare.refill()  # one at a time
    assert spare.path.exists()
    journal = Journal(tmp_path, "ex_2", new=True)
    journal.open(spare)
    assert not spare.path.exists()  # renamed into the journal's first segment
    journal.append(b"into the spare")
    assert Journal(tmp_path, "ex_2").read(0, 100) == b"into the spare"
    assert segment_path(tmp_path, "ex_2", 0).read_bytes() == b"into the spare"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        segment_path(tmp_path, "ex_1", 0).name, segment_path(tmp_path, "ex_2", 0).name]
    # One a dead guardian left is used again, empty; one that cannot be moved is let go.
    spare.path.write_bytes(b"left")
    again = SpareFile(tmp_path)
    again.refill()
    assert spare.path.read_bytes() == b""
    assert again.take(tmp_path / "missing" / "ex_3.seg") is None
    again.refill()
    assert spare.path.exists()
    again.close()
    taken.close()
    journal.close()


def test_pruning_deletes_exactly_the_victims_journals(tmp_path: Path) -> None:
    paths = GuardianPaths("k", tmp_path / "run", tmp_path / "state")
    paths.journals.mkdir(parents=True)
    catalog = Catalog(tmp_path / "c.sqlite3")
    retention = Retention(catalog, paths, catalog.clock, RetentionLimits(max_records=2))
    for i in (1, 10, 11):  # ex_1 is a prefix of ex_10 and ex_11
        catalog.insert_execution({**_record(f"ex_{i}"), "status": "exited",
                                  "terminal_unix_ms": catalog.clock.now_ms()})
        Journal(paths.journals, f"ex_{i}", retain=4, head=0).append(b"x" * 10)  # several segments
    assert len(list(paths.journals.glob("ex_1.*"))) > 1
    assert retention.prune_thread("th", protect=set()) == ["ex_1"]
    assert not list(paths.journals.glob("ex_1.*"))
    assert list(paths.journals.glob("ex_10.*")) and list(paths.journals.glob("ex_11.*"))


# -- recovery advice skips shlex for commands that cannot launch an agent ---------------------


@given(st.text(alphabet="claudeodx '\"\\/-|;", max_size=24))
@example("cl'au'de --resume x")
@example('c"odex" resume')
@example("cla\\ude")
@example("/bin/codex")
@example("echo claude; ls")
@example("cl'a ude")
def test_recovery_advice_shortcut_never_hides_a_launch(command: str) -> None:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    names = ("claude", "codex")
    launches = any(w in names or w.rsplit("/", 1)[-1] in names for w in words)
    assert (recovery_advice(command) is not None) == launches


# -- checkpoints beside the loop --------------------------------------------------------------


def test_checkpoints_move_to_a_thread_once_the_catalog_is_written(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    catalog = Catalog(path)
    catalog.checkpoint_in_background(every_s=0.05)

    def checkpointers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "catalog-checkpoint"]

    before = len(checkpointers())  # other tests' catalogs may be open in this process
    for i in range(checkpointer_module.CHECKPOINT_COMMITS - 1):
        with catalog.transaction():
            catalog.insert_execution(_record(f"ex_{i}"))
    assert len(checkpointers()) == before  # an idle guardian keeps no thread
    db_size = path.stat().st_size
    with catalog.transaction():
        catalog.insert_execution(_record("ex_last"))
    assert len(checkpointers()) == before + 1
    valve = catalog.connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    assert valve == checkpointer_module.CHECKPOINT_VALVE_PAGES
    # The thread copies the log into the database file (commits no longer do).
    assert poll(lambda: path.stat().st_size > db_size or None, timeout=10)
    assert len(catalog.list_executions("th", 100)) == checkpointer_module.CHECKPOINT_COMMITS
    catalog.close()
    assert len(checkpointers()) == before
