"""The one method table: every RPC method declared once (name, params model, result model,
capability), the guardian's handlers registered for exactly its methods, and the front-end
naming methods only through it."""

from __future__ import annotations

import re
from pathlib import Path
from unittest.mock import MagicMock

from tether.guardian.rpc.service import GuardianService
from tether.protocol.method_table import METHODS, Method
from tether.protocol.methods import Params
from tether.protocol.results import Result
from tether.protocol.versions import CAPABILITY_HISTORY, Version, capabilities_for

FRONTEND = Path(__file__).resolve().parent.parent / "frontend"

#: The methods every guardian serves whatever its version: they need no capability.
UNGATED = {"hello", "guardian.shutdown"}


def test_every_method_has_a_params_model_a_result_model_and_a_known_capability() -> None:
    known = set().union(*CAPABILITY_HISTORY.values())
    assert len(METHODS) == 42
    for name, method in METHODS.items():
        assert isinstance(method, Method) and method.name == name
        assert issubclass(method.params, Params) and method.params is not Params, name
        assert issubclass(method.result, Result) and method.result is not Result, name
        if method.capability is None:
            assert name in UNGATED, f"{name} names no capability"
        else:
            assert method.capability in known, f"{name}: {method.capability} is in no version"


def test_methods_that_type_text_are_those_whose_params_carry_it() -> None:
    # The front-end checks typed text's lines against older guardians by this flag.
    assert {m.name for m in METHODS.values() if m.types_text} == {
        m.name for m in METHODS.values() if "text" in m.params.model_fields}


def _service(state: Path) -> GuardianService:
    runtime = MagicMock()  # the rooms only keep it until a request comes
    runtime.paths.state = state
    version = Version(1, max(CAPABILITY_HISTORY))
    return GuardianService(runtime=runtime, instance_id="gi_table", identity={},
                           auth_token="token", version=version,
                           capabilities=capabilities_for(version), clock=MagicMock(),
                           on_activity=lambda: None, on_shutdown=lambda reason: None)


def test_the_guardian_registers_a_handler_for_exactly_the_tables_methods(tmp_path: Path) -> None:
    service = _service(tmp_path)
    assert set(service._handlers) == set(METHODS)
    # The agent lifecycle is built on first use; its handlers then replace the stand-ins,
    # and it brings none for a method the table does not declare.
    service.agents  # noqa: B018 (builds it)
    assert set(service._handlers) == set(METHODS)
    assert not [m for m, h in service._handlers.items() if getattr(h, "agent_method", False)]


def test_the_front_end_names_methods_only_through_the_table() -> None:
    names = "|".join(re.escape(name) for name in METHODS)
    literal = re.compile(rf"""["']({names})["']""")
    found = [f"{path.relative_to(FRONTEND)}:{n}: {line.strip()}"
             for path in sorted(FRONTEND.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []


def test_a_reply_becomes_a_map_in_one_place_on_each_side() -> None:
    # The tools' results (tools/replies.py) and a person's printed views (person/connect.py).
    found = sorted(str(path.relative_to(FRONTEND)) for path in FRONTEND.rglob("*.py")
                   if ".wire()" in path.read_text())
    assert found == ["person/connect.py", "tools/replies.py"]
