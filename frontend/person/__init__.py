"""A person's commands: ``tether ls``, ``show``, ``tail``, ``attach``, ``doctor``, ``report``.

They talk to guardians over the same RPC client as the MCP tools (never to PTYs directly)
and never start a guardian: looking must not change what is running.
"""
