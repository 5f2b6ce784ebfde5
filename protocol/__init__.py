"""Tether's wire protocol: msgpack envelopes over ZeroMQ between front-end and guardian.

This package is the protocol's specification in code. It knows nothing of PTYs or MCP.

- :mod:`protocol.errors` — every stable error code and the :class:`TetherError` exception.
- :mod:`protocol.codec` — msgpack encoding with hard decode limits (docs/protocol.md#envelope).
- :mod:`protocol.envelope` — request/response envelopes and their validation.
- :mod:`protocol.versions` — protocol versions and the capability table (docs/protocol.md#handshake,
docs/protocol.md#versions-and-capabilities).
- :mod:`protocol.methods` — the RPC methods, their params and the capability each needs.
- :mod:`protocol.transport` — the DEALER client and ROUTER server (docs/protocol.md#transport,
docs/protocol.md#deadlines-and-the-guardian-instance).
"""
