"""Typed results (issue 10): every RPC method has a result model, the guardian's replies fit
them, and every tool advertises an outputSchema that its structured content satisfies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client
from pydantic import TypeAdapter, ValidationError

from tests.mcp_helpers import bash, call, call_error, execution, initialize, run
from tether.frontend.tools.outputs import SHAPES, describe
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import EXEC_OBSERVE, EXEC_START, METHODS
from tether.protocol.results import ExecResult, ObserveResult, Page, PageSlice, Result
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


def test_every_method_has_a_result_model() -> None:
    assert all(issubclass(method.result, Result) for method in METHODS.values())


def test_results_of_an_older_guardian_parse_and_newer_fields_pass_through() -> None:
    older: dict[str, Any] = {
        "execution": {"execution_id": "ex_1", "status": "exited", "exit_code": 0},
        "output": {"text": "hi", "start": 0, "end": 3, "truncated": False}, "cwd": "/w"}
    parsed = EXEC_START.read(older)
    assert isinstance(parsed, ExecResult) and parsed.input is None
    # Nothing added on the way through: neither by the model nor by what it sends on.
    assert parsed.wire() == parsed.model_dump(exclude_unset=True) == older
    newer = {**older, "execution": {**older["execution"], "cpu_ms": 12}, "hint": "new"}
    again = EXEC_START.read(newer)
    assert again.wire() == again.model_dump(exclude_unset=True) == newer
    assert again.execution.model_extra == {"cpu_ms": 12}


def test_a_reply_the_guardian_built_goes_out_as_it_was_built() -> None:
    wire: dict[str, Any] = {
        "items": [{"errors": [], "status": "ok", "execution": {"execution_id": "ex_1"},
                   "page": {"text": "hi", "start": 0, "end": 2, "has_more": False,
                            "next_cursor": "c"}}],
        "catalog_cursor": 7, "completed_with_issues": True, "hint": "new"}
    built = ObserveResult.built(wire)
    assert built.wire() is wire  # sent as it is: no copy, nothing added or dropped
    assert (built.catalog_cursor, built.completed_with_issues) == (7, True)
    assert built.model_extra == {"hint": "new"}
    # Unchecked on the guardian's side; the front-end's read of it checks it.
    read = EXEC_OBSERVE.read(wire)
    assert isinstance(read, ObserveResult)
    assert (page := read.items[0]["page"]) is not None and page["text"] == "hi"
    item = wire["items"][0]
    bad_page = {**item, "page": {**item["page"], "start": "zero"}}
    for wrong in ([{"status": "ok"}], [bad_page], [{**item, "errors": [{"code": "x"}]}]):
        with pytest.raises(TetherError) as caught:
            EXEC_OBSERVE.read({**wire, "items": wrong})
        assert caught.value.code == ErrorCode.PROTOCOL_MISMATCH, wrong


def test_observe_items_are_typed_maps_that_keep_what_they_do_not_name() -> None:
    # Maps, not models (32 items would be 97 models per call), checked all the same.
    newer = {"errors": [{"code": "c", "message": "m", "hint": 1}], "status": "ok",
             "execution": {"execution_id": "ex_1", "cpu_ms": 5},
             "page": {"text": "t", "start": 0, "end": 1, "has_more": False, "next_cursor": "c",
                      "encoding": "utf-8"}, "extra": True}
    read = EXEC_OBSERVE.read({"items": [newer], "catalog_cursor": 1})
    assert isinstance(read, ObserveResult) and read.items == [newer]
    # An item's page is a Page as ReadResult has it: the same keys, the same required ones.
    assert set(PageSlice.__annotations__) == set(Page.model_fields)
    minimal = {"text": "t", "start": 0, "end": 1, "has_more": False, "next_cursor": "c"}
    assert set(minimal) == {name for name, f in Page.model_fields.items() if f.is_required()}
    pages = TypeAdapter(PageSlice)
    assert pages.validate_python(minimal) == minimal
    for key in minimal:
        with pytest.raises(ValidationError):
            pages.validate_python({k: v for k, v in minimal.items() if k != key})


FIRST_CALL_PROBE = """
import asyncio, sys
import tether.frontend.guardians.locator as guardians
from tether.protocol.method_table import THREAD_OPEN, Method
from tether.protocol.results import ThreadOpenResult
from tether.shared.config import Config

ready_when_read = []
read = Method.read
def spy(method, reply):
    ready_when_read.append(method.checker_built())
    return read(method, reply)
Method.read = spy

async def main():
    locator = guardians.GuardianLocator(Config.from_env())
    try:
        handle = await locator.handle(sys.argv[1])
        before = THREAD_OPEN.checker_built()
        ready_when_read.clear()
        opened = await handle.call(THREAD_OPEN, {"principal": "local",
                                                   "workspace_root": sys.argv[1]}, timeout_s=10)
        print(before, ready_when_read == [True], type(opened) is ThreadOpenResult,
              opened.thread_id.startswith("th_"))
    finally:
        locator.close()

asyncio.run(main())
"""


def test_the_first_reply_of_a_kind_is_read_through_a_checker_built_while_it_came(
        tether_env: Config, workspace: Path) -> None:
    # A fresh process: no reply model is built yet. The first thread.open builds its checker
    # while the guardian answers, and its reply is read (and checked) through it.
    probe = subprocess.run([sys.executable, "-c", FIRST_CALL_PROBE, str(workspace)],
                           capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == ["False", "True", "True", "True"], probe.stderr


def test_a_reply_of_another_shape_is_refused() -> None:
    with pytest.raises(TetherError) as caught:
        EXEC_START.read({"execution": {"status": "exited"}})
    assert caught.value.code == ErrorCode.PROTOCOL_MISMATCH
    assert "exec.start" in caught.value.message


def _shape_of(tool: str, schema: dict[str, Any], data: dict[str, Any]) -> str | None:
    """The first of the tool's shapes (each named in ``data``'s description, field by field)
    that ``data`` satisfies, checked strictly: no coercion of types."""
    described = schema["properties"]["data"]["description"]
    for shape in SHAPES[tool]:
        assert describe(shape) in described, (tool, shape.__name__)
        try:
            TypeAdapter(shape).validate_python(data, strict=True)
        except ValidationError:
            continue
        return shape.__name__
    return None


async def _schemas(client: Client) -> dict[str, dict[str, Any]]:
    tools = (await client.list_tools()).tools
    assert all(tool.output_schema for tool in tools), [t.name for t in tools]
    return {tool.name: tool.output_schema or {} for tool in tools}


async def test_structured_content_satisfies_the_output_schema(client: Client,
                                                             workspace: Path) -> None:
    schemas = await _schemas(client)
    session = await initialize(client, workspace)
    ran = await run(client, session, "echo typed")
    eid = ran["execution_id"]
    scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("Initialize", {"type": "status", "workspace_root": str(workspace),
                        "thread_id": session["thread_id"]}),
        ("BashCommand", {**scope, "action_json": {"type": "status_check", "execution_id": eid}}),
        ("BashCommand", {**scope, "action_json": {"type": "screen"}}),
        ("Execution", {**scope, "action": {"type": "list"}}),
        ("Execution", {**scope, "action": {"type": "get", "execution_id": eid}}),
        ("Execution", {**scope, "action": {"type": "read", "execution_id": eid}}),
        ("Execution", {**scope, "action": {"type": "observe", "items": [{"execution_id": eid}]}}),
        ("Execution", {**scope, "action": {"type": "wait", "execution_ids": [eid],
                                           "timeout_seconds": 0}}),
        ("Execution", {**scope, "action": {"type": "explain", "execution_id": eid}}),
        ("Agent", {**scope, "action": "list"}),
        ("Agent", {**scope, "action": "explain", "target": eid}),
    ]
    for tool, args in calls:
        result = await client.call_tool(tool, args)
        assert result.structured_content is not None and not result.is_error, (tool, result)
        jsonschema.validate(result.structured_content, schemas[tool])
        shape = _shape_of(tool, schemas[tool], result.structured_content["data"])
        assert shape is not None, (tool, args, result.structured_content["data"])
    refused = await client.call_tool("Execution", {**scope, "action": {
        "type": "get", "execution_id": "ex_nope"}})
    assert refused.is_error and refused.structured_content is not None
    jsonschema.validate(refused.structured_content, schemas["Execution"])
    # The schema says something: a result without its envelope does not satisfy it.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"data": {}}, schemas["BashCommand"])
    assert (await call(client, "Execution", calls[4][1]))["data"]["execution"]["status"] == "exited"
    assert (await call_error(client, "Execution", {**scope, "action": {
        "type": "get", "execution_id": "ex_nope"}}))["code"] == "not_found"
    assert (await execution(client, session, {"type": "get", "execution_id": eid}))["ok"]
    assert (await bash(client, session, {"type": "screen"}))["screen"]["live"] in (True, False)
