"""Imported first by the guardian's entry point: keep out what the guardian never uses.

The guardian talks ZeroMQ over a local socket and never TLS, but asyncio imports ``ssl``
(which maps libssl) only to offer TLS transports: about 2 MB of the guardian's resident
memory (SPEC §11: idle RSS at most 40 MB). With ``ssl`` marked absent, asyncio simply offers
no TLS. Only a process that has not imported asyncio yet is changed: a test runner or any
other host that imports guardian modules keeps its ``ssl``.
"""

from __future__ import annotations

import sys

if "asyncio" not in sys.modules and "ssl" not in sys.modules:
    sys.modules["ssl"] = None  # type: ignore[assignment]
