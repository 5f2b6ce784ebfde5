"""Who may touch what: a request's thread and records, checked against this guardian.

Every handler that names a thread or an execution asks here first, so a request of another
principal, workspace or thread is refused the same way everywhere (``session_mismatch`` for
the thread, ``not_found`` for a record: never its data).
"""

from __future__ import annotations

from typing import Any

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import Scoped
from tether.shared.store.catalog import Catalog
from tether.shared.store.rows import ThreadRow


class Scope:
    """The (principal, workspace) this guardian serves, and the checks that keep to it."""

    def __init__(self, catalog: Catalog, *, principal: str, workspace_root: str) -> None:
        self._catalog = catalog
        self.principal = principal
        self.workspace_root = workspace_root

    def thread_for(self, params: Scoped) -> ThreadRow:
        """The thread named by a scoped request, checked against principal and workspace."""
        thread = self._catalog.get_thread(params.thread_id)
        if (
            thread is None
            or thread["principal"] != params.principal
            or thread["workspace_root"] != params.workspace_root
            or params.principal != self.principal
        ):
            raise TetherError(
                ErrorCode.SESSION_MISMATCH,
                "thread_id and workspace_root do not match a thread of this workspace; "
                "call Initialize and use the values it returns",
                {"input_sent": False},
            )
        return thread

    def record_for(self, params: Scoped, execution_id: str) -> dict[str, Any]:
        """A record of the request's thread (or a managed agent of its workspace); anything
        else is ``not_found`` (never data)."""
        record = self._catalog.get_execution(execution_id)
        if record is None or not self.visible(record, params):
            raise TetherError(
                ErrorCode.NOT_FOUND,
                f"no execution {execution_id!r} in this thread (it may have been pruned)",
                {"input_sent": False},
            )
        return record

    @staticmethod
    def visible(record: dict[str, Any], params: Scoped) -> bool:
        """A record of the caller's thread, or a managed agent of its workspace (agents
        belong to the workspace, not to the thread that launched them: docs/tools.md#managed-agents)."""
        if record["principal"] != params.principal:
            return False
        if record["thread_id"] == params.thread_id:
            return True
        return bool(record["kind"] == "agent" and record["workspace_root"] == params.workspace_root)
