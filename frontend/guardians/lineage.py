"""Which Tether execution is this front-end running inside? (docs/tools.md#trees-and-parents)

An agent that uses Tether itself starts a front-end from inside its own terminal. Every
agent that front-end launches is stamped with that execution as its parent:

1. from the environment — every process Tether starts carries ``TETHER_EXECUTION_ID`` and
   ``TETHER_WORKSPACE``;
2. otherwise (MCP clients often start servers with a scrubbed environment) by asking the
   guardians which live execution is one of this process's ancestors (pid + create time,
   never a pid alone), first the guardian of the workspace the call is for, then every
   other live guardian of this principal.

Parentage never comes from ``cwd``. The answer cannot change while this process lives (an
ancestor execution existed before this process did), so it is looked up once: once it is
certain. When a guardian could not be asked (restarting, stalled past the lookup's timeout),
"no parent" is only what is known so far, and the lookup is tried again after
``RETRY_UNCERTAIN_S``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil

from tether.protocol.errors import TetherError
from tether.protocol.limits import MAX_ANCESTORS
from tether.protocol.method_table import EXEC_ANCESTOR
from tether.protocol.versions import Capability
from tether.shared.identity import ProcessIdentity

if TYPE_CHECKING:
    from tether.frontend.guardians.locator import GuardianLocator

ENV_EXECUTION = "TETHER_EXECUTION_ID"
ENV_WORKSPACE = "TETHER_WORKSPACE"
LOOKUP_TIMEOUT_S = 5.0
#: How long an uncertain "no parent" stands before the guardians are asked again.
RETRY_UNCERTAIN_S = 30.0


@dataclass(frozen=True, slots=True)
class Parent:
    """The execution this front-end runs inside."""

    execution_id: str
    workspace_root: str
    source: str  # "environment" or "ancestry"


def ancestors(pid: int | None = None) -> list[tuple[int, float]]:
    """``(pid, create_time)`` of a process and its ancestors, nearest first."""
    chain: list[tuple[int, float]] = []
    try:
        proc: psutil.Process | None = psutil.Process(pid or os.getpid())
        while proc is not None and len(chain) < MAX_ANCESTORS:
            chain.append((proc.pid, proc.create_time()))
            proc = proc.parent()
    except psutil.Error:
        pass
    return chain


def live_guardian_roots(locator: GuardianLocator) -> list[str]:
    """Workspaces with a live guardian of this principal (from their ``guardian.json``)."""
    roots = []
    runtime = locator.config.runtime_dir
    for path in sorted(runtime.glob("*/guardian.json")) if runtime.is_dir() else []:
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        ident = ProcessIdentity.from_dict(info)
        if (isinstance(info, dict) and info.get("principal") == locator.principal
                and ident is not None and ident.alive() and info.get("workspace_root")):
            roots.append(str(info["workspace_root"]))
    return roots


@dataclass
class Lineage:
    """This front-end's parent execution, kept once it is certain (see the module's text)."""

    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    _resolved: bool = False
    _parent: Parent | None = None
    #: After an uncertain "no parent": when to ask the guardians again (monotonic seconds).
    _retry_at: float | None = None

    async def parent(self, locator: GuardianLocator, workspace_root: str) -> Parent | None:
        if self._resolved:
            return self._parent
        execution_id = self.env.get(ENV_EXECUTION)
        workspace = self.env.get(ENV_WORKSPACE)
        if execution_id and workspace:
            self._parent = Parent(execution_id, workspace, "environment")
        else:
            if self._retry_at is not None and time.monotonic() < self._retry_at:
                return None
            parent, certain = await self._by_ancestry(locator, workspace_root)
            if parent is None and not certain:
                self._retry_at = time.monotonic() + RETRY_UNCERTAIN_S
                return None
            self._parent = parent
        self._resolved = True
        return self._parent

    async def _by_ancestry(self, locator: GuardianLocator,
                           workspace_root: str) -> tuple[Parent | None, bool]:
        """The parent found by asking the guardians, and whether every guardian able to
        answer did (so that "none" is certain; an older guardian without the agent
        lifecycle never can, and is not waited for)."""
        chain = ancestors()
        roots = [workspace_root, *(r for r in live_guardian_roots(locator) if r != workspace_root)]
        certain = True
        for root in roots:
            try:
                handle = await locator.handle(root)
                if str(Capability.AGENT_LIFECYCLE) not in handle.capabilities:
                    continue  # an older guardian cannot answer; its executions stay unknown
                found = await handle.call(
                    EXEC_ANCESTOR,
                    {"principal": locator.principal, "workspace_root": root,
                     "ancestors": [list(a) for a in chain]},
                    timeout_s=LOOKUP_TIMEOUT_S,
                )
            except TetherError:
                certain = False
                continue
            if found.execution_id:
                return Parent(str(found.execution_id), root, "ancestry"), True
        return None, certain
