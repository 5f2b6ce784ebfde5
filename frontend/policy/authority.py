"""Who may do what (docs/security.md#profiles-and-modes, docs/security.md#principals): callers, profiles,
tools, workspaces, and the Agent actions.

A :class:`Caller` is the authenticated principal of one MCP request: ``local`` over stdio,
``http:<id>`` over streamable HTTP. Its profile (or an explicit ``allow_tools``) decides the
tools it sees in ``tools/list`` *and* may call; its ``workspaces`` the roots it may use.

Agent actions fall into three classes, decided here and nowhere else:

- observe (``AGENT_OBSERVE``): reads only; the Agent tool is enough.
- control (``AGENT_CONTROL``): changes records or stops a process but types nothing and
  starts nothing; needs BashCommand authority.
- input (``AGENT_INPUT``): types into a terminal or starts a program; needs BashCommand
  authority *and* the thread in mode ``wcgw``.

An action not listed is treated as input (fail closed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import ModeSpec

INITIALIZE, BASH, EXECUTION, AGENT = "Initialize", "BashCommand", "Execution", "Agent"
READ_FILES, EDIT_FILES = "ReadFiles", "EditFiles"
ALL_TOOLS = (INITIALIZE, BASH, EXECUTION, AGENT, READ_FILES, EDIT_FILES)
TERMINAL_TOOLS = (INITIALIZE, BASH, EXECUTION, AGENT)

#: Tools each profile lists and lets its principal call. ``terminal`` is the terminals
#: without the file tools; ``read-only`` reads execution records only (``allow_tools`` can
#: add ReadFiles, never EditFiles: docs/security.md#profiles).
PROFILES: dict[str, frozenset[str]] = {
    "full": frozenset(ALL_TOOLS),
    "coding": frozenset(ALL_TOOLS),
    "terminal": frozenset(TERMINAL_TOOLS),
    "read-only": frozenset({INITIALIZE, EXECUTION}),
}
#: Tools that change things: ``allow_tools`` never grants one beyond its profile.
WRITING_TOOLS = (BASH, EDIT_FILES)

AGENT_OBSERVE = frozenset({"list", "get", "read", "explain", "wait", "notifications",
                           "approvals"})
AGENT_CONTROL = frozenset({"close", "archive", "label"})
AGENT_INPUT = frozenset({"prompt", "cancel", "launch", "resume", "unarchive", "respond"})


@dataclass(frozen=True, slots=True)
class Caller:
    """The principal behind one request, with what it may use."""

    principal: str
    profile: str
    tools: frozenset[str]
    workspaces: tuple[str, ...] | None = None  # canonical roots; None: any workspace

    @property
    def has_bash_authority(self) -> bool:
        return BASH in self.tools

    def check_tool(self, tool: str) -> None:
        """Refuse a call to a tool this caller is not given (it is not listed either)."""
        if tool not in self.tools:
            raise TetherError(
                ErrorCode.TOOL_DENIED,
                f"tool {tool} is not available to principal {self.principal} (profile "
                f"{self.profile}: {', '.join(t for t in ALL_TOOLS if t in self.tools)}); nothing "
                "was done. Ask the operator for a profile or allow_tools that includes it.",
                {"tool": tool, "profile": self.profile, "input_sent": False},
            )

    def check_workspace(self, root: str) -> None:
        """Refuse a canonical workspace outside this caller's ``workspaces``."""
        if self.workspaces is None or any(_within(root, allowed) for allowed in self.workspaces):
            return
        raise TetherError(
            ErrorCode.WORKSPACE_DENIED,
            f"principal {self.principal} may use only workspaces under "
            f"{', '.join(self.workspaces)}; {root} is not one of them. Nothing was done.",
            {"workspace_root": root, "input_sent": False},
        )


#: The caller of the stdio front-end: the user who started it, with every tool.
LOCAL = Caller(principal="local", profile="full", tools=PROFILES["full"])


def tools_for(profile: str, allow_tools: list[str] | None) -> frozenset[str]:
    """The tools of a principal: its profile's, or exactly ``allow_tools`` (plus Initialize).

    ``allow_tools`` may expose Agent for observation to a read-only principal, but never
    BashCommand: a read-only profile cannot be given the right to run commands.
    """
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    if allow_tools is None:
        return PROFILES[profile]
    unknown = [t for t in allow_tools if t not in ALL_TOOLS]
    if unknown:
        raise ValueError(f"allow_tools names unknown tools {unknown}; tools: {', '.join(ALL_TOOLS)}")
    for tool in WRITING_TOOLS:
        if tool in allow_tools and tool not in PROFILES[profile]:
            raise ValueError(f"allow_tools cannot grant {tool} to profile {profile}")
    return frozenset({INITIALIZE, *allow_tools})


def agent_action_class(action: str) -> str:
    """``observe``, ``control`` or ``input`` (anything unknown is ``input``)."""
    if action in AGENT_OBSERVE:
        return "observe"
    if action in AGENT_CONTROL:
        return "control"
    return "input"


def authorize_agent_action(caller: Caller, action: str, mode: ModeSpec | None) -> None:
    """The one check the Agent tool makes per action, before anything is sent.

    ``mode`` is the thread's mode; it may be None only for an observe action (which does not
    need it), so callers fetch it only when :func:`agent_action_class` is not ``observe``.
    """
    kind = agent_action_class(action)
    if kind == "observe":
        return
    if not caller.has_bash_authority:
        raise TetherError(
            ErrorCode.TOOL_DENIED,
            f"Agent {action} needs BashCommand authority, which principal {caller.principal} "
            f"(profile {caller.profile}) does not have; Agent is available to it for "
            "observation only. Nothing was typed or started.",
            {"action": action, "rule": "bash_authority", "input_sent": False},
        )
    if kind == "input" and (mode is None or mode.name != "wcgw"):
        name = mode.name if mode is not None else "unknown"
        raise TetherError(
            ErrorCode.MODE_DENIED,
            f"Agent {action} types into or starts an agent, which only mode wcgw allows; this "
            f"thread is in mode {name}. Nothing was typed or started. Change the mode with "
            "Initialize type=change_mode.",
            {"mode": name, "action": action, "rule": "agent_input_needs_wcgw",
             "input_sent": False},
        )


def _within(root: str, allowed: str) -> bool:
    return root == allowed or root.startswith(allowed.rstrip(os.sep) + os.sep)
