"""``tether report``: summarise a usage log (docs/person.md#usage-log) per tool, action and backend.

Rules, after the seed's "Workflow telemetry" and "Usage metrics":

- auxiliary events (``tool_started``, ``tool_phase``) are set aside before ``--last`` applies,
  so the window is always the last N terminal ``tool_call`` events;
- ``--since-minutes 0`` means no time limit;
- error codes count error results only, each with its code or as ``unknown``; the code of a
  call that completed with issues is counted apart (``issue_codes``);
- a number that is not finite (NaN, Infinity, 1e400) is malformed, so unknown;
- missing or malformed data stays unknown: a call without a duration is counted as
  ``duration_unknown`` and never as a zero sample, a group with no known duration has
  percentiles ``null``; a malformed line is counted, never guessed at;
- only ``tool_call`` lines of the ``usage_schema`` versions it knows are read; lines of
  another version, or with none, are counted per version and set aside (never mixed in),
  before ``--last`` applies;
- phase totals are inclusive (they overlap) and are not parts of the call's duration;
- a prompt that repeats a ``prompt_id`` (``receipt_replayed``) is counted as a repeat, apart
  from deliveries: its receipt is the first delivery's;
- a Herdr prompt counts as a submission (``acknowledged``, ``uncertain``, ``not_sent``,
  ``unknown``), never as a native receipt: an acknowledged submission is not a completed task.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.frontend.person.term import table, visible

AUXILIARY = frozenset({"tool_started", "tool_phase"})
#: The ``usage_schema`` versions this report reads (``tether.frontend.usage.USAGE_SCHEMA``).
KNOWN_USAGE_SCHEMAS = (1,)
_KNOWN_SCHEMA_NAMES = frozenset(str(v) for v in KNOWN_USAGE_SCHEMAS)
RECEIPT_FACTS = ("delivered", "activity_observed", "wait_reached", "input_sent")
#: A Herdr prompt's submission as the usage log classifies it (``usage.herdr_submission``).
HERDR_SUBMISSIONS = ("acknowledged", "uncertain", "not_sent", "unknown")
#: ReadFiles request shapes (``read_request_schema``), summed like observe's items.
READ_COUNTERS = ("read_whole_file_requests", "read_bounded_range_requests",
                 "read_open_ended_range_requests")
OBSERVE_COUNTERS = ("observe_requested_items", "observe_returned_items",
                    "observe_items_with_issues")


def percentile(samples: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None (unknown) for no samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _finite(value: Any) -> float | None:
    """A finite non-negative number, or None: JSON from Python may hold NaN, Infinity or
    1e400 (read as infinity), and an integer too big for a float."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _count(value: Any) -> int | None:
    """A non-negative integer counter, or None when missing or malformed."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _schema(event: dict[str, Any]) -> str:
    """A line's ``usage_schema`` as a short name: ``1``, ``missing``, ``null``, or ``other``
    for anything that is not a plain small integer (never the raw value: the log's text)."""
    if "usage_schema" not in event:
        return "missing"
    value = event["usage_schema"]
    if value is None:
        return "null"
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**6:
        return str(value)
    return "other"


def _label(value: Any) -> str:
    return value if isinstance(value, str) and value else "unknown"


@dataclass
class Group:
    """Aggregates of one (tool, action, backend)."""

    tool: str
    action: str
    backend: str
    count: int = 0
    durations: list[float] = field(default_factory=list)
    duration_unknown: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    error_codes: Counter[str] = field(default_factory=Counter)
    issue_codes: Counter[str] = field(default_factory=Counter)
    observe: dict[str, list[int]] = field(default_factory=dict)
    observe_unknown: Counter[str] = field(default_factory=Counter)
    reads: dict[str, list[int]] = field(default_factory=dict)
    reads_unknown: Counter[str] = field(default_factory=Counter)
    #: temporary_over_budget as measured by the calls that looked (true/false/unknown)
    temporary: Counter[str] = field(default_factory=Counter)
    receipts: dict[str, Counter[str]] = field(default_factory=dict)
    #: Approvals listed (a sum), and responses: stale, replayed and how they ended (counts).
    approvals: Counter[str] = field(default_factory=Counter)
    catalog: Counter[str] = field(default_factory=Counter)
    effective_wait: list[float] = field(default_factory=list)
    effective_wait_unknown: int = 0
    herdr: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, event: dict[str, Any]) -> None:
        self.count += 1
        duration = _finite(event.get("duration_ms"))
        if duration is not None:
            self.durations.append(duration)
        else:
            self.duration_unknown += 1
        result = _label(event.get("outcome"))
        self.outcomes[result] += 1
        # Every error result counts, with its code or as unknown; the code of a call that
        # completed with issues (an observe with a missing item) is not an error.
        if result == "error":
            self.error_codes[_label(event.get("code"))] += 1
        elif result == "completed_with_issues":
            self.issue_codes[_label(event.get("code"))] += 1
        if self.action == "observe":
            for name in OBSERVE_COUNTERS:
                value = _count(event.get(name))
                if value is None:
                    self.observe_unknown[name] += 1
                else:
                    self.observe.setdefault(name, []).append(value)
        if self.tool == "ReadFiles":
            for name in READ_COUNTERS:
                value = _count(event.get(name))
                if value is None:
                    self.reads_unknown[name] += 1
                else:
                    self.reads.setdefault(name, []).append(value)
        if self.tool in ("ReadFiles", "EditFiles"):
            over = event.get("temporary_over_budget")
            if event.get("temporary_usage_schema") == 1 and isinstance(over, bool):
                self.temporary[str(over).lower()] += 1
            elif "temporary_usage_schema" in event:
                self.temporary["unknown"] += 1
        if self.backend == "herdr":
            self._add_herdr(event)
        elif event.get("receipt_observed") is True or (self.tool == "Agent"
                                                       and self.action == "prompt"):
            replayed = event.get("receipt_replayed")
            kind = ("repeat" if replayed else "new") if isinstance(replayed, bool) else "unknown"
            self.receipts.setdefault("calls", Counter())[kind] += 1
            if kind != "repeat":  # a repeat reports the first delivery again: not counted twice
                for fact in RECEIPT_FACTS:
                    value = event.get(f"receipt_{fact}")
                    bucket = self.receipts.setdefault(fact, Counter())
                    bucket[str(value).lower() if isinstance(value, bool) else "unknown"] += 1
        if self.tool == "Agent" and self.action == "approvals":
            listed = _count(event.get("approvals_listed"))
            if listed is None:
                self.approvals["listed_unknown"] += 1
            else:
                self.approvals["listed"] += listed
        if self.tool == "Agent" and self.action == "respond":
            if event.get("approval_stale") is True:
                self.approvals["stale"] += 1
            elif event.get("approval_replayed") is True:
                self.approvals["replayed"] += 1
            else:
                how = event.get("approval_outcome")
                self.approvals[how if how in ("approved", "denied", "other", "unknown",
                                              "pending") else "outcome_unknown"] += 1
        if self.action == "wait" and self.tool in ("Execution", "Agent") and self.backend != "herdr":
            outcome = event.get("catalog_outcome")
            self.catalog[outcome if outcome in ("changed", "timeout", "resync") else "unknown"] += 1
        if self.tool == "BashCommand" and "requested_wait_policy" in event:
            wait = _finite(event.get("effective_wait_ms"))
            if wait is not None:
                self.effective_wait.append(wait)
            else:
                self.effective_wait_unknown += 1

    def _add_herdr(self, event: dict[str, Any]) -> None:
        """A Herdr call: its prompt's submission (acknowledged, uncertain, not sent) and its
        wait's outcome; never a native receipt."""
        if self.action == "prompt":
            kind = event.get("herdr_submission")
            self.herdr.setdefault("submissions", Counter())[
                kind if kind in HERDR_SUBMISSIONS else "unknown"] += 1
        elif self.action == "wait":
            outcome = event.get("catalog_outcome")
            self.herdr.setdefault("waits", Counter())[
                outcome if outcome in ("matched", "timeout") else "unknown"] += 1

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "tool": self.tool, "action": self.action, "backend": self.backend,
            "count": self.count,
            "duration_ms": {"p50": percentile(self.durations, 0.5),
                            "p95": percentile(self.durations, 0.95),
                            "known": len(self.durations), "unknown": self.duration_unknown},
            "outcomes": dict(self.outcomes),
            "error_codes": dict(self.error_codes),
            "error_results": sum(self.error_codes.values()),
        }
        if self.issue_codes:
            data["issue_codes"] = dict(self.issue_codes)
        if self.action == "observe":
            data["observe"] = {
                name.removeprefix("observe_"): {
                    "sum": sum(self.observe[name]) if name in self.observe else None,
                    "calls_known": len(self.observe.get(name, [])),
                    "calls_unknown": self.observe_unknown[name],
                } for name in OBSERVE_COUNTERS
            }
        if self.tool == "ReadFiles":
            data["reads"] = {
                name.removeprefix("read_").removesuffix("_requests"): {
                    "sum": sum(self.reads[name]) if name in self.reads else None,
                    "calls_known": len(self.reads.get(name, [])),
                    "calls_unknown": self.reads_unknown[name],
                } for name in READ_COUNTERS
            }
        if self.temporary:
            data["temporary_over_budget"] = dict(self.temporary)
        if self.receipts:
            data["receipts"] = {fact: dict(bucket) for fact, bucket in self.receipts.items()}
        if self.approvals:
            data["approvals"] = dict(self.approvals)
        if self.catalog:
            data["catalog"] = dict(self.catalog)
        if self.herdr:
            data["herdr"] = {name: dict(counts) for name, counts in self.herdr.items()}
        if self.effective_wait or self.effective_wait_unknown:
            data["effective_wait_ms"] = {"p50": percentile(self.effective_wait, 0.5),
                                         "known": len(self.effective_wait),
                                         "unknown": self.effective_wait_unknown}
        return data


@dataclass
class Report:
    lines_seen: int = 0
    malformed_lines: int = 0
    auxiliary_events: int = 0
    other_events: int = 0
    undated_excluded: int = 0
    tool_calls_in_log: int = 0
    #: tool_call lines set aside, by their usage_schema (see :func:`_schema`).
    other_schemas: Counter[str] = field(default_factory=Counter)
    groups: dict[tuple[str, str, str], Group] = field(default_factory=dict)
    phases: dict[str, list[float]] = field(default_factory=dict)
    started_without_terminal: int = 0
    window: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines_seen": self.lines_seen,
            "malformed_lines": self.malformed_lines,
            "auxiliary_events": self.auxiliary_events,
            "other_events": self.other_events,
            "tool_calls_in_log": self.tool_calls_in_log,
            "usage_schemas_read": list(KNOWN_USAGE_SCHEMAS),
            "other_schema_calls": dict(self.other_schemas),
            "tool_calls": sum(g.count for g in self.groups.values()),
            "window": {**self.window, "undated_excluded": self.undated_excluded},
            "workflows": [g.to_dict() for _, g in sorted(self.groups.items())],
            "phases": {name: {"count": len(samples), "p50_ms": percentile(samples, 0.5),
                              "p95_ms": percentile(samples, 0.95)}
                       for name, samples in sorted(self.phases.items())},
            "started_without_terminal": self.started_without_terminal,
        }


def build_report(lines: Iterable[str], *, last: int | None, since_minutes: float,
                 now_ms: int) -> Report:
    report = Report(window={"last": last, "since_minutes": since_minutes})
    calls: list[dict[str, Any]] = []
    started: set[str] = set()
    finished: set[str] = set()
    phase_events: list[dict[str, Any]] = []
    for line in lines:
        report.lines_seen += 1
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            report.malformed_lines += 1
            continue
        if not isinstance(event, dict) or not isinstance(event.get("event"), str):
            report.malformed_lines += 1
            continue
        kind = event["event"]
        call_id = event.get("usage_call_id")
        if kind in AUXILIARY:
            report.auxiliary_events += 1
            if kind == "tool_started" and isinstance(call_id, str):
                started.add(call_id)
            elif kind == "tool_phase":
                phase_events.append(event)
            continue
        if kind != "tool_call":
            report.other_events += 1
            continue
        report.tool_calls_in_log += 1
        if isinstance(call_id, str):
            finished.add(call_id)
        schema = _schema(event)
        if schema in _KNOWN_SCHEMA_NAMES:
            calls.append(event)
        else:  # its fields may mean something else: counted, never mixed in
            report.other_schemas[schema] += 1
    if since_minutes > 0:
        cutoff = now_ms - since_minutes * 60_000
        kept = []
        for event in calls:
            ts = _finite(event.get("ts_unix_ms"))
            if ts is None:
                report.undated_excluded += 1
            elif ts >= cutoff:
                kept.append(event)
        calls = kept
    if last is not None:
        calls = calls[-last:] if last > 0 else []
    window_ids = set()
    for event in calls:
        key = (_label(event.get("tool")), _label(event.get("action")), _label(event.get("backend")))
        report.groups.setdefault(key, Group(*key)).add(event)
        if isinstance(event.get("usage_call_id"), str):
            window_ids.add(event["usage_call_id"])
    for event in phase_events:
        duration = _finite(event.get("duration_ms"))
        call_id = event.get("usage_call_id")
        if (isinstance(call_id, str) and call_id in window_ids and event.get("edge") == "finish"
                and duration is not None):
            report.phases.setdefault(_label(event.get("phase")), []).append(duration)
    report.started_without_terminal = len(started - finished)
    return report


def _ms(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}"


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{k}×{v}" for k, v in sorted(counter.items())) or "-"


def _details(g: dict[str, Any]) -> list[str]:
    """The lines under the table for one group: observe items, receipts, issues, waits."""
    out: list[str] = []
    name = f"{g['tool']}.{g['action']} ({g['backend']})"
    if "observe" in g:
        parts = []
        for key, value in g["observe"].items():
            shown = "unknown" if value["sum"] is None else str(value["sum"])
            extra = f" ({value['calls_unknown']} calls unknown)" if value["calls_unknown"] else ""
            parts.append(f"{key} {shown}{extra}")
        out.append(f"{name} observe items: " + "; ".join(parts))
    if "receipts" in g:
        receipts = dict(g["receipts"])
        calls = receipts.pop("calls", {})
        repeats = calls.get("repeat", 0)
        out.append(f"{name} prompt receipts: calls {_counts(calls)}"
                   + (f" ({repeats} repeated a prompt_id: answered from the first "
                      "delivery, nothing sent, not counted below)" if repeats else "")
                   + "".join(f"; {fact} {_counts(counts)}"
                             for fact, counts in receipts.items()))
    if "herdr" in g:
        herdr = g["herdr"]
        if "submissions" in herdr:
            out.append(f"{name} herdr submissions: {_counts(herdr['submissions'])} (acknowledged: "
                       "Herdr submitted the text, not that the work was done; uncertain: input "
                       "unknown after a timeout, never resent)")
        if "waits" in herdr:
            out.append(f"{name} herdr waits: {_counts(herdr['waits'])}")
    if "approvals" in g:
        out.append(f"{name} approvals: {_counts(g['approvals'])}")
    if "issue_codes" in g:
        out.append(f"{name} completed with issues (not errors): {_counts(g['issue_codes'])}")
    if "catalog" in g:
        out.append(f"{name} catalog outcomes: {_counts(g['catalog'])}")
    if "effective_wait_ms" in g:
        w = g["effective_wait_ms"]
        out.append(f"{name} effective wait p50 {_ms(w['p50'])} ms "
                   f"({w['known']} known, {w['unknown']} unknown)")
    return out


def render_text(data: dict[str, Any], log: Path) -> str:
    out = [f"usage log {log}: {data['lines_seen']} lines, {data['tool_calls']} tool calls in the "
           f"window ({data['tool_calls_in_log']} in the log), "
           f"{data['malformed_lines']} malformed lines"]
    if data["other_schema_calls"]:
        read = ", ".join(str(v) for v in data["usage_schemas_read"])
        out.append(f"{sum(data['other_schema_calls'].values())} tool calls set aside, by "
                   f"usage_schema: {_counts(data['other_schema_calls'])} (this report reads "
                   f"version {read}; a newer Tether's lines need its own tether report)")
    if data["window"]["undated_excluded"]:
        out.append(f"{data['window']['undated_excluded']} calls without a time were left out "
                   "of the --since-minutes window")
    rows = []
    for g in data["workflows"]:
        d = g["duration_ms"]
        unknown = f" (+{d['unknown']} unknown)" if d["unknown"] else ""
        rows.append([g["tool"], g["action"], g["backend"], str(g["count"]),
                     _ms(d["p50"]), _ms(d["p95"]) + unknown, _counts(g["outcomes"]),
                     _counts(g["error_codes"])])
    out.append(table(["TOOL", "ACTION", "BACKEND", "CALLS", "P50 MS", "P95 MS", "OUTCOMES",
                      "ERROR CODES"], rows) if rows else "no tool calls in the window")
    for g in data["workflows"]:
        # Tool, action and code names are the log's text: a hand-edited or foreign log can
        # hold escape sequences, shown, never sent to the terminal (tables do the same).
        out += [visible(line) for line in _details(g)]
    if data["phases"]:
        out.append("phases (inclusive: they overlap; do not add them up):")
        out.append(table(["PHASE", "COUNT", "P50 MS", "P95 MS"], [
            [name, str(p["count"]), _ms(p["p50_ms"]), _ms(p["p95_ms"])]
            for name, p in data["phases"].items()]))
    if data["started_without_terminal"]:
        out.append(f"{data['started_without_terminal']} calls started without a terminal event "
                   "(completion not observed: a killed process, a cancellation or a rotation; "
                   "not evidence that they still run)")
    return "\n".join(out)


def _minutes(text: str) -> float:
    """``--since-minutes``: a finite number of minutes, 0 or more (nan would mean no limit,
    and would reach --json as NaN, which is not JSON)."""
    try:
        minutes = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(minutes) or minutes < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of minutes, 0 or more (0: no limit), got {text!r}")
    return minutes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether report",
                                     description="Summarise a Tether usage log (TETHER_USAGE_LOG).")
    parser.add_argument("--log", type=Path,
                        help="the usage log (JSONL; default: $TETHER_USAGE_LOG)")
    parser.add_argument("--last", type=int, default=None,
                        help="only the last N tool calls (auxiliary events are not counted)")
    parser.add_argument("--since-minutes", type=_minutes, default=0.0,
                        help="only calls from the last M minutes (0: no limit)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    if args.last is not None and args.last < 0:
        parser.error("--last must be 0 or more")
    if args.log is None:
        named = os.environ.get("TETHER_USAGE_LOG", "")
        if not named:
            parser.error("name the usage log: --log FILE, or set TETHER_USAGE_LOG (the "
                         "variable tether serve writes it to)")
        args.log = Path(named)
    try:
        with args.log.open(encoding="utf-8", errors="replace") as fh:
            report = build_report(fh, last=args.last, since_minutes=args.since_minutes,
                                  now_ms=int(time.time() * 1000))
    except OSError as exc:
        print(f"tether report: cannot read {args.log}: {exc.strerror}", file=sys.stderr)
        return 2
    data = report.to_dict()
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, allow_nan=False))  # strict JSON
    else:
        print(render_text(data, args.log))
    return 0
