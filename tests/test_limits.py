"""One definition each for id patterns, limits and timeouts (issue 10).

A constant defined in two modules drifts: ``RPC_SLACK_S`` once had two values in three
places. These checks read the source, so a second definition fails here before it ships.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tether.frontend.tools.schemas import AgentArgs, ExecutionArgs, ReadAction
from tether.protocol import codec, limits
from tether.protocol.methods import AgentPromptParams, ExecReadParams

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocol", "shared", "guardian", "frontend")


def _module_constants() -> dict[str, list[str]]:
    """UPPER_CASE names assigned at module level, with the files assigning them."""
    seen: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in tree.body:
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    targets = [node.target]
                for target in targets:
                    elements = target.elts if isinstance(target, ast.Tuple) else [target]
                    for element in elements:
                        if isinstance(element, ast.Name) and re.fullmatch(r"[A-Z][A-Z0-9_]+",
                                                                          element.id):
                            seen.setdefault(element.id, []).append(
                                str(path.relative_to(ROOT)))
    return seen


def test_no_constant_is_defined_twice() -> None:
    twice = {name: files for name, files in _module_constants().items() if len(files) > 1}
    assert twice == {}


def test_id_patterns_are_written_only_in_limits() -> None:
    patterns = (limits.ID_PATTERN, limits.RECOGNIZER_PATTERN, limits.PROMPT_ID_PATTERN)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "limits.py" and path.parent.name == "protocol":
                continue
            text = path.read_text()
            for pattern in patterns:
                assert pattern not in text, f"{path} spells out {pattern}; use protocol.limits"


def test_tool_schemas_and_params_share_their_limits() -> None:
    """What the MCP client is told is what the guardian enforces."""
    tool = ReadAction.model_json_schema()["properties"]["page_bytes"]
    wire = ExecReadParams.model_json_schema()["properties"]["page_bytes"]
    assert (tool["minimum"], tool["maximum"]) == (wire["minimum"], wire["maximum"]) == (
        limits.MIN_PAGE_BYTES, limits.MAX_PAGE_BYTES)
    agent = AgentArgs.model_json_schema()["properties"]
    prompt = AgentPromptParams.model_json_schema()["properties"]
    assert agent["timeout_seconds"]["maximum"] * 1000 == prompt["timeout_ms"]["maximum"]
    ids = ExecutionArgs.model_json_schema()["$defs"]["WaitAction"]["properties"]["execution_ids"]
    assert ids["maxItems"] == limits.MAX_WAIT_IDS


def test_a_pages_text_fits_what_every_decoder_takes() -> None:
    """The guardian bounds a page's rendered text by MAX_PAGE_TEXT_RATIO; the decoders'
    limits come from the same module, so the largest page fits one string of a frame and
    the largest observe fits a frame (a 64 KiB page of column jumps rendered to 3.6 MB and
    the front-end refused the reply)."""
    decoder = codec.DEFAULT_LIMITS
    assert (decoder.max_frame_bytes, decoder.max_str_len, decoder.max_bin_len,
            decoder.max_array_len, decoder.max_map_len, decoder.max_depth) == (
        limits.MAX_FRAME_BYTES, limits.MAX_FRAME_STR_BYTES, limits.MAX_FRAME_BIN_BYTES,
        limits.MAX_FRAME_ARRAY_LEN, limits.MAX_FRAME_MAP_LEN, limits.MAX_FRAME_DEPTH)
    ratio = limits.MAX_PAGE_TEXT_RATIO
    assert limits.MAX_PAGE_BYTES * ratio <= decoder.max_str_len
    assert limits.MAX_OBSERVE_BUDGET * ratio <= decoder.max_frame_bytes // 8
    assert limits.MIN_PAGE_BYTES * ratio >= len("\ufffd".encode())  # one byte's text
