"""The MCP server and its transports: stdio, streamable HTTP, and ``tether serve``."""
