"""The MCP tools: one module per tool (the registry is ``registry``), with what they share:
input schemas, output schemas, tool results and the checks of a thread's mode (``modes``)."""
