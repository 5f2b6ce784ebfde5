"""One module per tool; :data:`TOOLS` is the registry the server lists and dispatches."""

from __future__ import annotations

from frontend.tools.agent import AgentTool
from frontend.tools.base import Tool
from frontend.tools.bash_command import BashCommandTool
from frontend.tools.execution import ExecutionTool
from frontend.tools.initialize import InitializeTool


def all_tools() -> list[Tool]:
    """Every tool, in the order clients see them."""
    return [InitializeTool(), BashCommandTool(), ExecutionTool(), AgentTool()]
