"""Archive across workspaces (docs/tools.md#trees-and-parents), shared by the Agent tool and ``tether
agents``.

The guardian of the archived agent's workspace archives its subtree in one catalog
transaction. Children that live in *other* workspaces are in other guardians' catalogs: they
are detached (never archived) by asking every other live guardian of this principal to
detach its agents whose parent is one of the archived ids — one transaction per guardian
(on another host too, when this front-end is connected to it: docs/hosts.md#a-fleet-seen-as-one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.frontend.guardians.lineage import live_guardian_roots
from tether.protocol.errors import TetherError
from tether.protocol.limits import AGENT_RPC_TIMEOUT_S
from tether.protocol.method_table import AGENT_ARCHIVE, AGENT_DETACH_REMOTE
from tether.protocol.results import AgentArchiveResult
from tether.protocol.versions import Capability

if TYPE_CHECKING:
    from tether.frontend.guardians.locator import GuardianLocator


@dataclass(frozen=True, slots=True)
class ArchiveOutcome:
    """An archive with its cascade: the guardian's reply, the agents it archived, the agents
    detached in this workspace and the others, and the other workspaces that could not be
    asked (``{workspace_root, reason}``)."""

    reply: AgentArchiveResult
    archived: list[str]
    detached: list[str]
    skipped: list[dict[str, str]]


async def archive_everywhere(
    locator: GuardianLocator, root: str, execution_id: str, thread_id: str | None = None,
) -> ArchiveOutcome:
    """Archive ``execution_id`` (in ``root``) with its cascade; returns the merged outcome."""
    scope: dict[str, Any] = {"principal": locator.principal, "workspace_root": root}
    if thread_id is not None:
        scope["thread_id"] = thread_id
    reply = await locator.call(
        root, AGENT_ARCHIVE, {**scope, "execution_id": execution_id}, timeout_s=AGENT_RPC_TIMEOUT_S)
    archived = list(reply.archived)
    detached = list(reply.detached)
    skipped: list[dict[str, str]] = []
    # This machine's live guardians, and those on other hosts this front-end is connected to
    # (a child on another host is a child in another workspace: detached, not archived).
    for other in [*live_guardian_roots(locator), *locator.remote_roots()]:
        if other == root:
            continue
        try:
            handle = await locator.handle(other)
            if str(Capability.AGENT_LIFECYCLE) not in handle.capabilities:
                skipped.append({"workspace_root": other, "reason": "capability_missing"})
                continue
            remote = await handle.call(
                AGENT_DETACH_REMOTE,
                {"principal": locator.principal, "workspace_root": other, "parent_workspace": root,
                 "parent_ids": archived},
                timeout_s=AGENT_RPC_TIMEOUT_S,
            )
        except TetherError as err:
            skipped.append({"workspace_root": other, "reason": err.code.value})
            continue
        detached.extend(remote.detached)
    return ArchiveOutcome(reply, archived, detached, skipped)
