"""Finding guardians and executions for a person's commands, without starting anything."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tether.frontend.guardians.health import measured, restart_for, stopped
from tether.frontend.guardians.locator import GuardianHandle, GuardianLocator
from tether.frontend.person.offline import OnDisk, find_on_disk, ids_on_disk
from tether.frontend.person.term import visible
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_WORKSPACE_LIST, RPC_SLACK_S
from tether.protocol.method_table import EXEC_DESCRIBE, WORKSPACE_LIST, Method
from tether.protocol.methods import Params
from tether.protocol.results import DescribeResult, Result
from tether.protocol.versions import Capability, minor_introducing
from tether.shared.clock import Clock
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths, canonical_workspace, ensure_private_dir

#: How long ``tether tail -f`` and ``tether attach`` ask the guardian to wait for output.
FOLLOW_WAIT_MS = 10_000
T = TypeVar("T")
P = TypeVar("P", bound=Params)
R = TypeVar("R", bound=Result)


def as_data(reply: Result) -> dict[str, Any]:
    """A reply as a person's command prints it (``--json``, or every field of a record): the
    fields the guardian sent, as it sent them. The one place a person's view makes a map of a
    reply; the map is a new one at the top."""
    return dict(reply.wire())


@dataclass
class Found:
    """One guardian.json and what became of connecting to it."""

    info: dict[str, Any]
    paths: GuardianPaths
    alive: bool
    handle: GuardianHandle | None = None
    error: TetherError | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def workspace(self) -> str:
        return str(self.info.get("workspace_root") or "?")

    def scope(self) -> dict[str, Any]:
        return {"principal": self.info.get("principal") or "local",
                "workspace_root": self.info.get("workspace_root")}

    async def call(self, method: Method[P, R], params: dict[str, Any], *,
                   timeout_s: float = RPC_SLACK_S) -> R:
        if self.handle is None:
            raise self.error or TetherError(ErrorCode.GUARDIAN_UNAVAILABLE,
                                            f"the guardian of {self.workspace} is not running")
        self.handle.require(Capability.PERSON_VIEW)
        return await self.handle.call(method, {**self.scope(), **params}, timeout_s=timeout_s)


    async def watch(self, interval_s: float = 0.5) -> None:
        """Return never; raise ``guardian_unavailable`` as soon as the guardian process is
        gone, and ``guardian_unresponsive`` as soon as it is stopped (a long poll would
        otherwise only notice when its deadline passes)."""
        ident = ProcessIdentity.from_dict(self.info)
        while True:
            await asyncio.sleep(interval_s)
            if ident is None or not ident.alive():
                raise TetherError(ErrorCode.GUARDIAN_UNAVAILABLE,
                                  f"the guardian of {self.workspace} (pid {self.info.get('pid')}) "
                                  "has exited")
            if self.handle is not None and self.handle.stopped():
                raise stopped(self.info, self.workspace)

    def gone(self) -> bool:
        """Whether the guardian behind this entry has ended (its terminals with it)."""
        ident = ProcessIdentity.from_dict(self.info)
        return ident is None or not ident.alive()


async def watched(entry: Found | OnDisk, work: Awaitable[T]) -> T:
    """``work``, failing fast when the guardian behind ``entry`` dies meanwhile."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(entry.watch())
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        watcher.result()  # raises
        raise AssertionError("unreachable")
    finally:
        for pending in (task, watcher):
            pending.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)


def workspace_arg(text: str) -> str:
    """``--workspace``'s type: a path as a person types it, relative ones against the current
    directory (``--workspace .``); the guardian's key is made from the canonical form."""
    if not text:
        raise argparse.ArgumentTypeError("must be a directory, not empty")
    return os.path.abspath(text)


def announced(config: Config) -> list[tuple[Path, dict[str, Any] | None]]:
    """Every ``guardian.json`` under the runtime dir (None for an unreadable one)."""
    found: list[tuple[Path, dict[str, Any] | None]] = []
    if not config.runtime_dir.is_dir():
        return found
    for path in sorted(config.runtime_dir.glob("*/guardian.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            found.append((path, None))
            continue
        found.append((path, info if isinstance(info, dict) else None))
    return found


def _paths(config: Config, info_path: Path) -> GuardianPaths:
    key = info_path.parent.name
    return GuardianPaths(key=key, runtime=info_path.parent,
                         state=config.state_home / "guardians" / key)


@asynccontextmanager
async def guardians(config: Config, workspace: str | None = None, *,
                    clock: Clock | None = None) -> AsyncIterator[list[Found]]:
    """Connect to every live guardian (of ``workspace`` only, when given); close on exit."""
    clock = clock or Clock()
    # refuse an unsafe dir (docs/security.md#state-and-runtime-directories)
    ensure_private_dir(config.runtime_dir, what="runtime dir")
    root = canonical_workspace(workspace) if workspace else None
    locator = GuardianLocator(config)
    found: list[Found] = []
    for path, info in announced(config):
        if info is None or (root is not None and info.get("workspace_root") != root):
            continue
        ident = ProcessIdentity.from_dict(info)
        found.append(Found(info=info, paths=_paths(config, path),
                           alive=bool(ident and ident.alive())))

    async def connect(entry: Found) -> None:
        if not entry.alive:
            return
        asked = clock.monotonic()
        try:
            entry.handle = await locator.existing(entry.paths)
        except TetherError as err:
            entry.error = measured(err, entry.paths, entry.info, entry.workspace,
                                   waited_s=clock.monotonic() - asked)
            return
        if entry.handle is None:
            entry.error = TetherError(ErrorCode.GUARDIAN_UNAVAILABLE,
                                      f"the guardian of {entry.workspace} did not answer")

    try:
        await asyncio.gather(*(connect(entry) for entry in found))
        yield found
    finally:
        for entry in found:
            if entry.handle is not None:
                entry.handle.close()


async def find_execution(found: list[Found], execution_id: str, *, config: Config,
                         workspace: str | None = None) -> tuple[Found | OnDisk, DescribeResult]:
    """The guardian holding ``execution_id`` and its ``exec.describe`` (see
    :func:`_find_exact`); an id no guardian or catalog holds is taken as the start of one,
    as git and docker take ids: a unique prefix names that execution (the describe's
    ``execution.execution_id`` is its whole id), a prefix of several is refused with the
    candidates (``invalid_request``)."""
    try:
        return await _find_exact(found, execution_id, config=config, workspace=workspace)
    except TetherError as err:
        if err.code != ErrorCode.NOT_FOUND:
            raise
        candidates = await ids_with_prefix(found, execution_id, config=config,
                                           workspace=workspace)
        if not candidates:
            raise
    if len(candidates) > 1:
        raise ambiguous(execution_id, candidates)
    return await _find_exact(found, candidates[0], config=config, workspace=workspace)


#: Candidates an ambiguous prefix's error lists.
AMBIGUOUS_SHOWN = 10


def ambiguous(prefix: str, candidates: list[str]) -> TetherError:
    shown = ", ".join(candidates[:AMBIGUOUS_SHOWN])
    more = f" and {len(candidates) - AMBIGUOUS_SHOWN} more" if candidates[AMBIGUOUS_SHOWN:] else ""
    return TetherError(ErrorCode.INVALID_REQUEST,
                       f"{prefix!r} is the start of {len(candidates)} execution ids: {shown}"
                       f"{more}; give more of the id", {"candidates": candidates})


async def ids_with_prefix(found: list[Found], prefix: str, *, config: Config,
                          workspace: str | None = None) -> list[str]:
    """The execution ids starting with ``prefix`` that the running guardians list (their
    newest ``MAX_WORKSPACE_LIST`` records each) and the catalogs of gone ones hold, sorted."""
    ids: set[str] = set()
    for entry in found:
        if entry.handle is None:
            continue
        try:
            listing = await entry.call(WORKSPACE_LIST, {"limit": MAX_WORKSPACE_LIST})
        except TetherError:
            continue  # not asked: its ids stay out of the candidates
        ids.update(r.execution_id for r in listing.executions)
    running = {entry.paths.key for entry in found if entry.alive}
    ids.update(await asyncio.to_thread(
        ids_on_disk, config, prefix, skip=running,
        workspace=canonical_workspace(workspace) if workspace else None))
    return sorted(i for i in ids if i.startswith(prefix))


async def _find_exact(found: list[Found], execution_id: str, *, config: Config,
                      workspace: str | None = None) -> tuple[Found | OnDisk, DescribeResult]:
    """The guardian holding ``execution_id`` and its ``exec.describe``; or, when no running
    guardian holds it, the record on disk of a guardian that is gone (``OnDisk``).

    When it is in neither, and a live guardian could not be asked (stopped, hung), the error
    is that guardian's (``guardian_unresponsive``, with how to resume it); when a guardian too
    old to be looked into (no ``person_view``) may hold it, ``capability_missing`` with how to
    upgrade it. ``not_found`` only when every guardian was asked and no catalog has it.
    """
    too_old: list[Found] = []
    unasked: list[TetherError] = []
    silent = (ErrorCode.GUARDIAN_UNAVAILABLE, ErrorCode.GUARDIAN_UNRESPONSIVE)
    for entry in found:
        if entry.handle is None:
            # Only a guardian that did not answer may be hiding it (one that answered with,
            # say, protocol_mismatch was asked, and cannot be looked into anyway).
            if entry.alive and entry.error is not None and entry.error.code in silent:
                unasked.append(entry.error)
            continue
        if Capability.PERSON_VIEW not in entry.handle.capabilities:
            too_old.append(entry)
            continue
        try:
            return entry, await entry.call(EXEC_DESCRIBE, {"execution_id": execution_id})
        except TetherError as err:
            if err.code in silent:
                unasked.append(err)  # silent meanwhile: another guardian may still hold it
            elif err.code != ErrorCode.NOT_FOUND:
                raise
    # A guardian that is gone left its catalog and journals: read the record from there.
    running = {entry.paths.key for entry in found if entry.alive}
    on_disk = await asyncio.to_thread(find_on_disk, config, execution_id, skip=running,
                                      workspace=canonical_workspace(workspace) if workspace
                                      else None)
    if on_disk is not None:
        return on_disk, await on_disk.call(EXEC_DESCRIBE, {"execution_id": execution_id})
    if unasked:
        first = unasked[0]
        more = f" ({len(unasked) - 1} more guardians did not answer either)" if unasked[1:] else ""
        raise TetherError(first.code, f"no guardian that answered holds execution "
                          f"{execution_id!r}, and one that may hold it did not answer: "
                          f"{first.message}{more}", first.data)
    if too_old:
        raise too_old_error(too_old, execution_id)
    raise TetherError(ErrorCode.NOT_FOUND,
                      f"no guardian holds execution {execution_id!r}, and no catalog on disk "
                      "has it (it may have been pruned)")


def too_old_error(too_old: list[Found], execution_id: str) -> TetherError:
    """``capability_missing`` for guardians that may hold ``execution_id`` but lack
    ``person_view``: nothing can be read from them until they are upgraded."""
    versions = [str(entry.handle.version) if entry.handle else "?" for entry in too_old]
    names = "; ".join(f"{entry.workspace} (protocol {version}): `{restart_for(entry.info)}`"
                      for entry, version in zip(too_old, versions, strict=True))
    capability = Capability.PERSON_VIEW
    return TetherError(
        ErrorCode.CAPABILITY_MISSING,
        f"no guardian that can be looked into holds execution {execution_id!r}, and "
        f"{'a guardian' if len(too_old) == 1 else 'guardians'} too old to be looked into "
        f"(no '{capability}', added in protocol {minor_introducing(capability)}) may hold it: "
        f"{names}. Restarting a guardian upgrades it; it ends its running terminals (their "
        "records stay readable).",
        {"capability": str(capability), "guardian_protocol": versions[0], "input_sent": False,
         "operator_action_required": True})


def run_cli(prog: str, body: Callable[[], Any]) -> int:
    """Run an async command body; a TetherError becomes one line on stderr and exit 2."""
    try:
        result = asyncio.run(body())
    except TetherError as err:
        # Messages quote paths and guardians' words: made visible like everything else.
        print(f"{prog}: {visible(err.message)} [{err.code.value}]", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(result or 0)
