"""The SDK's OpenTelemetry middleware runs only when a tracer provider is installed: without
one its spans record nothing, yet entering one per request costs CPU on every call."""

from __future__ import annotations

import pytest
from mcp.server._otel import OpenTelemetryMiddleware
from opentelemetry import trace

from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config


def _traced(config: Config) -> bool:
    return any(isinstance(m, OpenTelemetryMiddleware) for m in build_server(config).middleware)


def test_no_tracer_provider_no_tracing_middleware(tether_env: Config) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not _traced(tether_env)


def test_an_installed_tracer_provider_keeps_it(tether_env: Config,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.NoOpTracerProvider())
    assert _traced(tether_env)
