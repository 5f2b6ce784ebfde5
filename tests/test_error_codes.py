"""Error codes say what happened (issue 10): a conflict, an incomplete delivery, a code from a
newer guardian. Each is checked against a real guardian where one is involved."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import guardian_thread
from tether.frontend.tools import replies
from tether.protocol.envelope import parse_response
from tether.protocol.errors import ErrorCode, ForeignCode, TetherError
from tether.protocol.method_table import EXEC_INPUT, EXEC_START, EXEC_STATUS
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

#: More than a PTY's input queue takes from a program that never reads (about 12 KiB here).
CHUNK = "x" * 60_000


async def test_partial_write_is_input_incomplete_and_its_repeat_delivery_unknown(
    tether_env: Config, workspace: Path
) -> None:
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        # A program that never reads its input: the terminal's queue fills and stays full.
        start = {**scope, "command": "stty raw -echo; echo ready; exec sleep 60",
                 "background": True, "idempotency_key": "deaf", "wait_ms": 0}
        eid = (await handle.call(EXEC_START, start, timeout_s=10)).execution.execution_id
        for _ in range(100):
            status = await handle.call(EXEC_STATUS, {**scope, "execution_id": eid,
                                                       "wait_ms": 100}, timeout_s=10)
            if "ready" in status.output.text:
                break
        typed = {**scope, "execution_id": eid, "text": CHUNK, "idempotency_key": "fill"}
        with pytest.raises(TetherError) as refused:
            # A short deadline: the guardian gives up typing just before it.
            await handle.call(EXEC_INPUT, typed, timeout_s=1.0)
        assert refused.value.code == ErrorCode.INPUT_INCOMPLETE, refused.value
        data = refused.value.data
        assert data["input_sent"] == "partial" and 0 < data["bytes_written"] < len(CHUNK)
        assert data["bytes_total"] == len(CHUNK)
        # That attempt began typing and never finished: a repeat is not sent again.
        with pytest.raises(TetherError) as repeat:
            await handle.call(EXEC_INPUT, typed, timeout_s=5)
        assert repeat.value.code == ErrorCode.DELIVERY_UNKNOWN
        assert repeat.value.data["input_sent"] == "unknown"
        # Other input is refused the same way, never as a missing guardian.
        with pytest.raises(TetherError) as stuck:
            await handle.call(EXEC_INPUT, {**typed, "idempotency_key": "more"}, timeout_s=1.0)
        assert stuck.value.code == ErrorCode.INPUT_INCOMPLETE
        # Usually the queue is still full and nothing goes in; on a loaded machine the first
        # attempt may have stopped before filling it. Either way the reply says what happened.
        written = stuck.value.data["bytes_written"]
        assert stuck.value.data["input_sent"] == ("partial" if written else False), stuck.value.data


def _reply_with(code: object) -> TetherError:
    response = parse_response({"v": [1, 9], "id": "r1", "ok": False,
                               "error": {"code": code, "message": "from a newer guardian",
                                         "data": {"input_sent": False}}})
    assert response.error is not None
    return response.error


def test_unknown_code_from_a_newer_guardian_keeps_its_name() -> None:
    err = _reply_with("quota_exhausted")
    assert isinstance(err.code, ForeignCode) and err.code == "quota_exhausted"
    content = replies.error(err).structured_content
    assert content is not None
    assert (content["ok"], content["code"], content["message"]) == (
        False, "quota_exhausted", "from a newer guardian")
    assert content["data"] == {"input_sent": False}
    assert err.to_wire()["code"] == "quota_exhausted"


@pytest.mark.parametrize("code", [None, 7, "", "Not A Code", "x" * 65, "drop;table"])
def test_malformed_code_is_internal_error(code: object) -> None:
    assert _reply_with(code).code == ErrorCode.INTERNAL


def test_known_code_stays_ours() -> None:
    err = _reply_with("idempotency_conflict")
    assert err.code is ErrorCode.IDEMPOTENCY_CONFLICT
