"""The MCP front-end: thin and stateless. It never imports :mod:`guardian`; everything it
knows about terminals it learns from a guardian over :mod:`protocol`."""
