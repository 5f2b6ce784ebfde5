"""The runtime room handed from one code to the next in the same process
(docs/protocol.md#live-upgrade).

What is handed over is what lived only in memory: each running execution's terminal (its
controlling side stays open across ``execve``, its process stays this process's child), its
journal's exact end, its output counter; each main shell's marker state and where its
command stands; the change notifier's counts. Everything else (records, receipts, keys, turn
log) is in the catalog already.

A screen is not handed over: the new code rebuilds it from the last
:data:`SCREEN_REPLAY_BYTES` of the execution's journal (the queries in them are not answered
again). What the terminal showed before those bytes is not known to the new screen; the
handover document says so per execution (``screen``), and never claims more.

Capture and freeze run in one synchronous step right before the exec: no output is read
after the journals' ends are taken, so what the programs write meanwhile waits in their
terminals and is read, and journaled at the offsets that follow, by the new code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tether.guardian.history.journal import Journal
from tether.guardian.runtime.assembly import Runtime
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.pty import ExitStatus, PtyRuntime
from tether.guardian.terminal.screen import TerminalScreen
from tether.shared.segments import OutputSizes

#: How much of a journal's tail a rebuilt screen is fed.
SCREEN_REPLAY_BYTES = 64 * 1024


class HandoverError(Exception):
    """The handed-over state cannot be taken over as it is (said, never guessed around)."""


def blocked(rt: Runtime) -> str | None:
    """Why the runtime cannot be handed over at this instant (None: it can). Every reason
    settles by itself within moments (an end being confirmed, a write retried)."""
    if not rt.finisher.settled():
        return "an execution's end or output waits to be written to the disk again"
    for live in rt.live:
        if live.journal.unwritten:
            return (f"the journal of {live.execution_id} holds {live.journal.unwritten} bytes "
                    "the disk refused")
        if live.kind != "command" and (why := live.runtime.handover_blocked()) is not None:
            return f"execution {live.execution_id}: {why}"
    for shell in rt.threads.shells():
        if not shell.alive:
            return f"the exit of thread {shell.thread_id}'s main shell is being reported"
        if (why := shell.handover_blocked()) is not None:
            return f"the main shell of thread {shell.thread_id}: {why}"
    return None


def capture(rt: Runtime) -> dict[str, Any]:
    """The runtime room's part of the handover document (call right before :func:`freeze`,
    with no loop turn in between)."""
    executions = []
    for live in rt.live:
        window = live.journal.window
        executions.append({
            "execution_id": live.execution_id, "thread_id": live.thread_id,
            "kind": live.kind, "generation": live.generation,
            "activity_seq": live.activity_seq,
            "journal_start": window.start, "journal_end": live.journal.end,
            "runtime": live.runtime.handover() if live.kind != "command" else None,
            "screen": f"rebuilt from at most the last {SCREEN_REPLAY_BYTES} bytes of the "
                      "journal; what it showed before them is unknown",
        })
    shells = [shell.handover() for shell in rt.threads.shells() if shell.alive]
    return {
        "executions": executions,
        "shells": shells,
        "threads": rt.threads.handover(),
        "notifier": {"output_seq": rt.notifier.seq, "state_seq": rt.notifier.state_seq},
    }


def freeze(rt: Runtime) -> None:
    """Stop reading every terminal and let its descriptor survive the exec; journals'
    handles closed (their bytes are on disk: :func:`blocked` checked)."""
    rt.retention.cancel()
    for live in rt.live:
        if live.kind != "command":
            live.runtime.freeze_for_exec()
        live.journal.close()
    for shell in rt.threads.shells():
        if shell.alive:
            shell.runtime.freeze_for_exec()
    rt.spare.close()


def open_journal(rt: Runtime, entry: dict[str, Any]) -> Journal:
    """The execution's journal found on disk where the handover says it ends; anything else
    (a byte more or less) is refused, never written over."""
    journal = Journal(rt.paths.journals, entry["execution_id"], rt.live.sizes.tail,
                      head=rt.live.sizes.head,
                      figures=(int(entry["journal_start"]), int(entry["journal_end"])))
    if journal.end != int(entry["journal_end"]):
        raise HandoverError(f"the journal of {entry['execution_id']} ends at {journal.end} on "
                            f"disk, not at {entry['journal_end']} as handed over")
    return journal


def replay_screen(screen: TerminalScreen, journal: Journal) -> None:
    """Feed ``screen`` the last :data:`SCREEN_REPLAY_BYTES` of ``journal`` (see the module)."""
    offset = max(journal.start, journal.end - SCREEN_REPLAY_BYTES, 0)
    chunks = []
    while offset < journal.end:
        offset = journal.resume(offset)[0]
        data = journal.read(offset, journal.end - offset)
        if not data:
            break
        chunks.append(data)
        offset += len(data)
    if chunks:
        screen.replay(b"".join(chunks))


def rebuild_live(rt: Runtime, entry: dict[str, Any], runtime: PtyRuntime,
                 screen: TerminalScreen, *, replay: bool = True) -> LiveExecution:
    """The execution's live entry again, in the live table: its journal at the handed end,
    its screen rebuilt (``replay``), its record read afresh (its end is written against it)."""
    journal = open_journal(rt, entry)
    if replay:
        replay_screen(screen, journal)
    live = LiveExecution(
        execution_id=entry["execution_id"], thread_id=entry["thread_id"], kind=entry["kind"],
        generation=int(entry["generation"]), journal=journal, runtime=runtime, screen=screen,
        inserted_record=rt.catalog.get_execution(entry["execution_id"]),
    )
    live.activity_seq = int(entry["activity_seq"])
    rt.live.add(live)
    return live


def adopt_own_terminal(rt: Runtime, entry: dict[str, Any],
                       on_exit: Callable[[LiveExecution, ExitStatus], None]) -> LiveExecution:
    """A background command's or an agent's execution taken over: its process adopted, its
    output to its journal and screen as before, its exit to ``on_exit``."""
    holder: list[LiveExecution] = []
    notifier = rt.notifier

    def on_output(data: bytes) -> None:
        holder[0].take_output(data)
        notifier.notify_output()

    runtime = PtyRuntime.adopt(entry["runtime"], on_output=on_output,
                               on_exit=lambda status: on_exit(holder[0], status))
    flow = runtime.set_reading if entry["kind"] == "background" else None
    screen = TerminalScreen(cols=runtime.cols, rows=runtime.rows, respond=runtime.answer_query,
                            flow=flow)
    live = rebuild_live(rt, entry, runtime, screen)
    holder.append(live)
    return live


def adopt(rt: Runtime, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Take over the main shells (with their commands) and the background commands of the
    handover document; returns the entries left for other rooms (the agents')."""
    notifier = doc["notifier"]
    rt.notifier.resume_counts(int(notifier["output_seq"]), int(notifier["state_seq"]))
    entries = {entry["execution_id"]: entry for entry in doc["executions"]}
    shells = rt.threads.adopt(doc["threads"], doc["shells"])
    for shell, state in zip(shells, doc["shells"], strict=True):
        current = state["current"]
        if current is not None:
            entry = entries.pop(current)
            shell.current = rebuild_live(rt, entry, shell.runtime, shell.screen)
    left = []
    for entry in entries.values():
        if entry["kind"] == "background":
            adopt_own_terminal(rt, entry, lambda live, status: rt.finisher.finish(
                live, status.shell_style_code))
        elif entry["kind"] == "command":
            raise HandoverError(f"command {entry['execution_id']} has no main shell handed over")
        else:
            left.append(entry)
    return left


def check(journals: Path, sizes: OutputSizes, doc: dict[str, Any]) -> None:
    """The dry run's check of the runtime room's part: every journal is found on disk, at
    least as long as handed over (it grows while the guardian before goes on serving), and
    every command has its main shell."""
    for entry in doc["executions"]:
        journal = Journal(journals, entry["execution_id"], sizes.tail, head=sizes.head,
                          figures=(int(entry["journal_start"]), int(entry["journal_end"])))
        if journal.end < int(entry["journal_end"]):
            raise HandoverError(f"the journal of {entry['execution_id']} ends at {journal.end} "
                                f"on disk, before {entry['journal_end']} as handed over")
        if entry["runtime"] is None and not any(
                shell["current"] == entry["execution_id"] for shell in doc["shells"]):
            raise HandoverError(f"command {entry['execution_id']} has no main shell")
