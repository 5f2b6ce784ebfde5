"""Agent trees (docs/tools.md#trees-and-parents): archive with its cascade, unarchive, detach, and parentage
by
process ancestry.

Archive is a soft delete that cascades: the agent and its children, recursively, are
archived in one catalog transaction, except children held open by a client
(``tether.open.<client> = "true"``) or living in another workspace, which are detached
instead; then the archived agents' runtimes are closed. Children in other workspaces live in
other guardians' catalogs: the front-end passes the archived ids to them
(``agent.detach_remote``) and merges what they detached.

A front-end started inside a Tether execution with a scrubbed environment finds its parent
with ``exec.ancestor``: it sends its own process and its ancestors (pid + create time) and
this guardian answers with the live execution whose runtime is one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.guardian.agents.processes import Stopping
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import AgentDetachRemoteParams, AgentTargetParams, ExecAncestorParams
from tether.protocol.results import AgentArchiveResult, AgentResult, AncestorResult, DetachRemoteResult

if TYPE_CHECKING:
    from tether.guardian.agents.lifecycle import AgentLifecycle

#: Two create times of one process agree to this many seconds (psutil rounds them).
CREATE_TIME_TOLERANCE_S = 0.01


class Tree:
    """``agent.archive``, ``unarchive``, ``detach``, ``detach_remote`` and ``exec.ancestor``."""

    def __init__(self, lifecycle: AgentLifecycle) -> None:
        self.life = lifecycle
        self.store = lifecycle.store
        self._rt = lifecycle.rt

    def handlers(self) -> dict[str, Any]:
        return {
            "agent.archive": self.archive, "agent.unarchive": self.unarchive,
            "agent.detach": self.detach, "agent.detach_remote": self.detach_remote,
            "exec.ancestor": self.ancestor,
        }

    async def archive(self, request: Request, params: AgentTargetParams) -> AgentArchiveResult:
        self.life.agent(params, params.execution_id)
        return AgentArchiveResult.model_validate(await self.archive_cascade(params.execution_id))

    async def archive_cascade(self, execution_id: str) -> dict[str, Any]:
        """Archive ``execution_id`` and its subtree, then close the archived runtimes."""
        live = {run.execution_id for run in self._rt.live if run.kind == "agent"}
        cascade = self.store.archive_tree(execution_id, live)
        for moved in cascade.transitions:
            self.life.apply(moved)
        await self.life.runtimes.stop(cascade.archived, Stopping("closed", "archived"))
        for archived in cascade.archived:
            self.life.envs.remove(archived)  # launch variables live no longer than the agent
        record = self.store.get(execution_id)
        assert record is not None
        return {"agent": self.life.view(record), "archived": cascade.archived,
                "detached": cascade.detached, "workspace_root": self._rt.scope.workspace_root}

    async def unarchive(self, request: Request, params: AgentTargetParams) -> AgentResult:
        """Clear ``archived_at``, then resume (docs/tools.md#close-resume-archive)."""
        record = self.life.agent(params, params.execution_id)
        if record["archived_at"] is None:
            raise TetherError(ErrorCode.INVALID_STATE,
                              f"agent {params.execution_id} is not archived",
                              {"input_sent": False})
        record = self.store.unarchive(params.execution_id) or record
        return await self.life.resume_record(record)

    async def detach(self, request: Request, params: AgentTargetParams) -> AgentResult:
        """A person's gesture: clear the parent and every open label, nothing else."""
        self.life.agent(params, params.execution_id)
        record = self.store.detach(params.execution_id)
        assert record is not None
        self._rt.notifier.notify()
        return AgentResult.model_validate({"agent": self.life.view(record)})

    async def detach_remote(self, request: Request, params: AgentDetachRemoteParams
                            ) -> DetachRemoteResult:
        self.life.check_scope(params)
        detached = self.store.detach_children_of(params.parent_workspace, params.parent_ids)
        if detached:
            self._rt.notifier.notify()
        return DetachRemoteResult(detached=detached)

    async def ancestor(self, request: Request, params: ExecAncestorParams) -> AncestorResult:
        """The live execution of this guardian that one of ``ancestors`` is, nearest first."""
        self.life.check_scope(params)
        by_pid: dict[int, tuple[float, str | None, str]] = {}
        for live in self._rt.live:
            ident = live.runtime.identity
            if ident is not None and live.kind != "command":
                by_pid[ident.pid] = (ident.create_time, live.execution_id, live.thread_id)
        for shell in self._rt.threads.shells():
            ident = shell.runtime.identity
            if ident is not None:
                # A process under the main shell belongs to the command running in it.
                current = shell.current.execution_id if shell.current is not None else None
                by_pid[ident.pid] = (ident.create_time, current, shell.thread_id)
        for pid, create_time in params.ancestors:
            found = by_pid.get(pid)
            if found is not None and abs(found[0] - create_time) <= CREATE_TIME_TOLERANCE_S:
                if found[1] is None:
                    break  # an idle main shell: a process typed there by hand, no execution
                return AncestorResult(execution_id=found[1], thread_id=found[2],
                                      workspace_root=self._rt.scope.workspace_root)
        return AncestorResult(execution_id=None, thread_id=None,
                              workspace_root=self._rt.scope.workspace_root)
