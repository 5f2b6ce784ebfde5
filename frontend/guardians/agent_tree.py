"""Archive across workspaces (SPEC R24), shared by the Agent tool and ``tether agents``.

The guardian of the archived agent's workspace archives its subtree in one catalog
transaction. Children that live in *other* workspaces are in other guardians' catalogs: they
are detached (never archived) by asking every other live guardian of this principal to
detach its agents whose parent is one of the archived ids — one transaction per guardian.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.frontend.guardians.lineage import live_guardian_roots
from tether.protocol.errors import TetherError
from tether.protocol.limits import AGENT_RPC_TIMEOUT_S
from tether.protocol.versions import Capability

if TYPE_CHECKING:
    from tether.frontend.guardians.locator import GuardianLocator


async def archive_everywhere(
    locator: GuardianLocator, root: str, execution_id: str, thread_id: str | None = None,
) -> dict[str, Any]:
    """Archive ``execution_id`` (in ``root``) with its cascade; returns the merged outcome."""
    scope: dict[str, Any] = {"principal": locator.principal, "workspace_root": root}
    if thread_id is not None:
        scope["thread_id"] = thread_id
    reply = await locator.call(
        root, "agent.archive", {**scope, "execution_id": execution_id}, timeout_s=AGENT_RPC_TIMEOUT_S)
    data: dict[str, Any] = reply.wire()
    archived = list(data["archived"])
    detached = list(data["detached"])
    skipped: list[dict[str, str]] = []
    for other in live_guardian_roots(locator):
        if other == root:
            continue
        try:
            handle = await locator.handle(other)
            if str(Capability.AGENT_LIFECYCLE) not in handle.capabilities:
                skipped.append({"workspace_root": other, "reason": "capability_missing"})
                continue
            remote = await handle.call(
                "agent.detach_remote",
                {"principal": locator.principal, "workspace_root": other, "parent_workspace": root,
                 "parent_ids": archived},
                timeout_s=AGENT_RPC_TIMEOUT_S,
            )
        except TetherError as err:
            skipped.append({"workspace_root": other, "reason": err.code.value})
            continue
        detached.extend(remote.detached)
    result = {**data, "archived": archived, "detached": detached}
    if skipped:
        result["other_workspaces_skipped"] = skipped
    return result
