"""The registry the server lists and dispatches: every tool, in the order clients see them."""

from __future__ import annotations

from tether.frontend.tools.agent import AgentTool
from tether.frontend.tools.base import Tool
from tether.frontend.tools.bash_command import BashCommandTool
from tether.frontend.tools.execution import ExecutionTool
from tether.frontend.tools.files import EditFilesTool, ReadFilesTool
from tether.frontend.tools.initialize import InitializeTool


def all_tools() -> list[Tool]:
    """Every tool, in the order clients see them."""
    return [InitializeTool(), BashCommandTool(), ExecutionTool(), AgentTool(), ReadFilesTool(),
            EditFilesTool()]
