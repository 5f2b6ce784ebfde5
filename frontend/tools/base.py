"""What every tool has: a name, a description, an input model, and a ``run``."""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import mcp_types as types
from pydantic import BaseModel

from tether.frontend.guardians.lineage import Lineage
from tether.frontend.guardians.locator import GuardianLocator
from tether.frontend.herdr.operator_config import HerdrSettings
from tether.frontend.policy.authority import LOCAL, Caller
from tether.protocol.methods import ModeSpec
from tether.protocol.versions import Capability
from tether.shared.paths import canonical_workspace, refuse_broad_workspace
from tether.shared.ssh_target import RemoteWorkspace, is_remote

Progress = Callable[[float, float | None, str | None], Awaitable[None]]


#: Threads whose mode a long-running server remembers at most.
MAX_KNOWN_MODES = 4096


class KnownModes:
    """The mode each thread had when this front-end last looked: a hint, verified by the
    guardian on every input (a stale entry costs a retry, never a wrong delivery)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, str], ModeSpec] = {}

    def get(self, key: tuple[str, str, str]) -> ModeSpec | None:
        return self._seen.get(key)

    def remember(self, key: tuple[str, str, str], mode: ModeSpec) -> None:
        if len(self._seen) >= MAX_KNOWN_MODES:
            self._seen.clear()  # only a hint: forgetting costs one thread.mode read each
        self._seen[key] = mode

    def forget(self, key: tuple[str, str, str]) -> None:
        self._seen.pop(key, None)


@dataclass
class Session:
    """What a caller's tool calls share: its guardian locator, its authority and its
    lineage (looked up on first use, and kept once certain).

    The locator is the caller's own (guardians are keyed by principal), so nothing a call
    does can reach another principal's guardians, records, threads or cursors (docs/security.md#principals).
    """

    locator: GuardianLocator
    caller: Caller = LOCAL
    #: The mode each thread was last seen in, shared by the calls of one server (a hint).
    modes: KnownModes = field(default_factory=lambda: KnownModes())
    lineage: Lineage = field(default_factory=Lineage)
    #: The Herdr backend's settings, read once at start (none: the backend is disabled).
    herdr: HerdrSettings = field(default_factory=HerdrSettings)

    @property
    def principal(self) -> str:
        return self.caller.principal

    def workspace(self, workspace_root: str) -> str:
        """The canonical workspace root, refused when it is too broad or outside the caller's
        ``workspaces`` (``workspace_denied``), before anything starts."""
        if is_remote(workspace_root):
            # On another host: the host makes the path canonical and refuses a broad one.
            root = RemoteWorkspace.parse(workspace_root).url
        else:
            root = refuse_broad_workspace(canonical_workspace(workspace_root),
                                          self.locator.config)
        self.caller.check_workspace(root)
        return root

    def scope(self, thread_id: str, workspace_root: str) -> tuple[str, dict[str, Any]]:
        """Canonical workspace and the scope params every thread-scoped RPC carries."""
        root = self.workspace(workspace_root)
        return root, {"principal": self.principal, "workspace_root": root, "thread_id": thread_id}

    @staticmethod
    def idempotency_key() -> str:
        """A fresh key per tool call: a transport-level repeat of this call delivers once."""
        return secrets.token_hex(16)


class Tool(ABC):
    """Base class of the tools; subclasses set the class attributes and ``run``."""

    name: ClassVar[str]
    description: ClassVar[str]
    args_model: ClassVar[type[BaseModel]]
    #: The JSON schema of the structured content (``{ok, status, code?, message?, data}``).
    output_schema: ClassVar[dict[str, Any]]
    annotations: ClassVar[types.ToolAnnotations | None] = None

    def definition(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=self.args_model.model_json_schema(),
            output_schema=self.output_schema,
            annotations=self.annotations,
        )

    @abstractmethod
    async def run(self, session: Session, args: Any, progress: Progress) -> types.CallToolResult:
        """Carry out one validated call."""


async def require_list_pages(session: Session, root: str) -> None:
    """A listing's ``before`` goes only to a guardian that pages listings: an older one
    ignores the parameter and would answer with the newest page again (``capability_missing``
    instead, nothing sent)."""
    (await session.locator.handle(root)).require(Capability.LIST_PAGES)
