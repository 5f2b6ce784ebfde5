"""The input schemas ``tools/list`` publishes say what a call may carry: the observe limits
the guardian enforces, and numbers that are JSON numbers (never strings, never booleans)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from tests.mcp_helpers import call_error
from tether.frontend.transport.mcp_server import build_server
from tether.protocol.limits import MAX_OBSERVE_ITEMS, MAX_PAGE_BYTES, MIN_PAGE_BYTES
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        found: Any = root
        for part in ref.removeprefix("#/").split("/"):
            found = found[part]
        return dict(found)
    return schema


def _observe_item(execution: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the observe action's ``items`` schema, an item's schema) in Execution's schema."""
    action = execution["properties"]["action"]
    for option in action.get("oneOf") or action.get("anyOf") or []:
        branch = _resolve(option, execution)
        if branch["properties"]["type"].get("const") == "observe":
            items = branch["properties"]["items"]
            return items, _resolve(items["items"], execution)
    raise AssertionError("no observe action in Execution's schema")


def _numbers(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every integer or number property in a schema, by path."""
    if isinstance(schema, dict):
        if schema.get("type") in ("integer", "number"):
            yield path, schema
        for key, value in schema.items():
            yield from _numbers(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _numbers(value, f"{path}/{index}")


async def test_observe_publishes_the_limits_the_guardian_enforces(tether_env: Config) -> None:
    async with Client(build_server(tether_env)) as client:
        tools = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
    items, item = _observe_item(tools["Execution"])
    assert (items["minItems"], items["maxItems"]) == (1, MAX_OBSERVE_ITEMS)
    page = item["properties"]["page_bytes"]
    assert (page["minimum"], page["maximum"]) == (MIN_PAGE_BYTES, MAX_PAGE_BYTES)
    # Every number any tool takes has a range.
    for name, schema in tools.items():
        for path, number in _numbers(schema):
            assert "maximum" in number and "minimum" in number, (name, path, number)


async def test_a_number_given_as_a_string_or_a_boolean_is_refused(tether_env: Config,
                                                                  tmp_path: Any) -> None:
    scoped = {"thread_id": "th_x", "workspace_root": str(tmp_path)}
    async with Client(build_server(tether_env)) as client:
        for action in ({"type": "list", "limit": "5"}, {"type": "list", "limit": True},
                       {"type": "observe", "items": [{"execution_id": "ex_1", "page_bytes": "5"}]},
                       {"type": "wait", "execution_ids": ["ex_1"], "timeout_seconds": "1"}):
            refused = await call_error(client, "Execution", {**scoped, "action": action})
            assert refused["code"] == "invalid_request", (action, refused)
        refused = await call_error(client, "BashCommand", {
            **scoped, "wait_for_seconds": "1", "action_json": {"type": "status_check"}})
        assert refused["code"] == "invalid_request" and "wait_for_seconds" in refused["message"]
        # A JSON integer is still a number of seconds.
        whole = await call_error(client, "Execution", {
            **scoped, "action": {"type": "wait", "execution_ids": ["ex_1"], "timeout_seconds": 0}})
        assert whole["code"] != "invalid_request", whole
