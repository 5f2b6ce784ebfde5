"""``tether show ID``: one execution's whole record, recognition, receipts and events."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from tether.frontend.person.connect import (
    as_data,
    find_execution,
    guardians,
    run_cli,
    workspace_arg,
)
from tether.frontend.person.ls import age
from tether.frontend.person.term import Progress, visible
from tether.shared.config import Config

#: Record fields shown first, in this order; the rest follow alphabetically.
LEADING = ("execution_id", "kind", "status", "exit_code", "reason", "command", "title", "cwd",
           "thread_id", "workspace_root", "started_unix_ms", "ended_unix_ms")


def _when(ms: Any, now_ms: float) -> str:
    if not isinstance(ms, int):
        return visible(str(ms))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    return f"{stamp} ({age(ms, now_ms)} ago)"


def _text(value: Any) -> str:
    """A field as a person reads it: agents and programs set most of them (command, title,
    prompt ids, recognition reasons), so control characters are made visible; a value that
    is not there is a dash, not Python's ``None``."""
    return "—" if value is None else visible(str(value))


def render(data: dict[str, Any], now_ms: float) -> str:
    record = data["execution"]
    out = []
    keys = [k for k in LEADING if k in record] + sorted(k for k in record if k not in LEADING)
    for key in keys:
        value = record[key]
        if value is None or value == {} or value == []:
            continue
        if key == "screen_text":
            out.append(f"{key}: {len(str(value).encode())} bytes (`tether tail` / `attach` "
                       "show the output)")
        elif key.endswith("_unix_ms"):
            out.append(f"{key}: {_when(value, now_ms)}")
        elif isinstance(value, dict | list):
            out.append(f"{key}: {json.dumps(value, sort_keys=True)}")  # JSON escapes controls
        else:
            out.append(f"{_text(key)}: {_text(value)}")
    if data.get("from_disk"):
        out.append(f"guardian: none running; {_text(data['from_disk']['note'])}")
    else:
        out.append(f"live runtime in this guardian: {'yes' if data['live'] else 'no'}")
    decision = data.get("recognition")
    if decision:
        out.append(f"recognition: {_text(decision.get('state'))} by "
                   f"{_text(decision.get('recognizer'))} (rule {_text(decision.get('rule'))}, "
                   f"priority {_text(decision.get('priority'))}, "
                   f"reason {_text(decision.get('reason'))})")
        observation = data.get("observation") or {}
        out.append("  observed: " + ", ".join(f"{_text(k)} {_text(v)}"
                                              for k, v in sorted(observation.items())))
    elif data.get("recognition_error"):
        out.append(f"recognition: unavailable ({_text(data['recognition_error']['message'])})")
    receipts = data.get("receipts") or []
    out.append(f"prompt receipts: {len(receipts) or 'none'}")
    for receipt in receipts:
        out.append(f"  {_text(receipt.get('prompt_id'))}: generation "
                   f"{_text(receipt.get('generation'))}, delivered "
                   f"{_text(receipt.get('delivered'))}"
                   + (f" ({_text(receipt['reason'])})" if receipt.get("reason") else "")
                   + ", activity observed "
                   f"{_text(receipt.get('activity_observed'))}, wait reached "
                   f"{_text(receipt.get('wait_reached'))}")
    events = data.get("agent_events") or []
    out.append(f"agent events: {len(events) or 'none'}")
    for event in events:
        out.append("  " + ", ".join(f"{_text(k)} {_text(v)}" for k, v in event.items()))
    person = data.get("person_events") or []
    out.append(f"person events: {len(person) or 'none'}")
    for event in person:
        out.append(f"  {_text(event['kind'])} at {_when(event['at_unix_ms'], now_ms)} "
                   f"(attach session {_text(event['attach_id'])})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from tether.frontend.person.hosts import on_host

    # --host H: the same command, run on H over SSH (docs/hosts.md#a-fleet-seen-as-one).
    if (remote := on_host("show", sys.argv[2:] if argv is None else argv)) is not None:
        return remote
    parser = argparse.ArgumentParser(
        prog="tether show", description="Show one execution: its whole record, turn "
        "recognition, prompt receipts, agent events and person events.")
    parser.add_argument("--host", help="run this on that host over SSH ([user@]host[:port], "
                        "as your ssh configuration knows it)")
    parser.add_argument("execution_id", metavar="ID")
    parser.add_argument("--workspace", type=workspace_arg, help="look only in this workspace's guardian")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)

    async def body() -> int:
        config = Config.from_env()
        with Progress(f"looking for {args.execution_id}"):
            async with guardians(config, args.workspace) as found:
                entry, described = await find_execution(found, args.execution_id,
                                                        config=config, workspace=args.workspace)
        data = as_data(described)
        data["guardian"] = {"workspace_root": entry.workspace,
                            "instance_id": entry.info.get("instance_id")}
        print(json.dumps(data, indent=2, default=str) if args.json
              else render(data, time.time() * 1000))
        return 0

    return run_cli("tether show", body)
