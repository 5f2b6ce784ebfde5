"""Rooms depend one way: every import of the installed packages points down the rooms' order.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``,
at module level, inside functions and under ``if TYPE_CHECKING:`` (a type-only import still
ties one room's interface to another's). Each module belongs to the room of its longest
matching prefix below. A room may import itself and the rooms listed before it on its
side; ``protocol`` and ``shared`` are below both sides, and the guardian and the front-end
never import each other.
"""

from __future__ import annotations

import ast
import collections
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The folders that install as ``tether.<folder>`` (pyproject's package-dir).
FOLDERS = ("protocol", "shared", "frontend", "guardian")

#: Below both sides, lowest first: the wire, then what both processes share (the store too).
BASE = ("tether.protocol", "tether.shared")
#: Each side's rooms, lowest first. ``tether.guardian`` / ``tether.frontend`` alone are the
#: modules directly in that folder.
SIDES: dict[str, tuple[str, ...]] = {
    "guardian": (
        "tether.guardian.terminal",  # screens without PTYs: parser, lazy screen, render, keys
        "tether.guardian.history",   # what ran, as stored: journals, retention, pages, records, ledger
        "tether.guardian.runtime",   # what runs: PTYs, shells, launch, input, finish, threads
        "tether.guardian.agents",    # what a program is doing; managed agents
        "tether.guardian.views",     # read/observe/wait, inspection, a person's workspace view
        "tether.guardian.rpc",       # the door: handlers, daemon
        "tether.guardian",           # the process: main, lean
    ),
    "frontend": (
        "tether.frontend",            # what every room uses: the usage log
        "tether.frontend.policy",     # who may do what: principals, authority, shell policy
        "tether.frontend.guardians",  # the guardian client: locate, start, health, lineage
        "tether.frontend.herdr",      # the Herdr adapter: operator configuration, the CLI
        "tether.frontend.tools",      # the MCP tools and what they share (schemas, modes)
        "tether.frontend.transport",  # stdio, HTTP, the MCP server, `tether serve`
        "tether.frontend.person",     # a person's commands
    ),
}


@dataclass(frozen=True)
class Import:
    """One imported module: ``importer`` names ``target`` on ``line``."""

    importer: str
    line: int
    target: str


@dataclass(frozen=True)
class Room:
    name: str
    side: str | None  # None: protocol/shared, below both sides
    rank: int

    @property
    def folder_only(self) -> bool:
        """A side's top room holds the modules directly in its folder, not its sub-packages:
        a new sub-package is in no room until it is given a place in the order."""
        return self.side is not None and self.name == f"tether.{self.side}"


def _rooms() -> dict[str, Room]:
    rooms = {name: Room(name, None, rank) for rank, name in enumerate(BASE)}
    for side, names in SIDES.items():
        rooms.update({name: Room(name, side, len(BASE) + rank) for rank, name in enumerate(names)})
    return rooms


ROOMS = _rooms()


def room_of(module: str) -> Room | None:
    """The room of the longest prefix of ``module`` (whole dotted parts), None if none."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        room = ROOMS.get(".".join(parts[:end]))
        if room is not None:
            return None if room.folder_only and len(parts) > end + 1 else room
    return None


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the packages under ``root`` by its installed name."""
    found: dict[str, Path] = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["tether", *parts])] = path
    return found


def imports(found: dict[str, Path]) -> list[Import]:
    """Every import of a ``tether`` module by the modules in ``found``, wherever it is written.

    ``from a.b import c`` names ``a.b.c`` when that is a module, else ``a.b``; the packages
    a module's parents run on the way are not edges of their own.
    """
    edges: list[Import] = []

    def resolve(name: str) -> str:
        while name not in found and "." in name:
            name = name.rpartition(".")[0]
        return name

    for module, path in found.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in found else source
                         for alias in node.names]
            else:
                continue
            for name in dict.fromkeys(names):
                if name == "tether" or name.startswith("tether."):
                    edges.append(Import(module, node.lineno, resolve(name)))
    return edges


def order(side: str | None) -> str:
    """The rooms a room of ``side`` may import, lowest first, as a rule to print."""
    names = (*BASE, *SIDES[side]) if side is not None else BASE
    return " < ".join(name.removeprefix("tether.") for name in names)


def violations(edges: Iterable[Import]) -> list[str]:
    """What is wrong with ``edges``: each import that goes up or across the order (with its
    module, line and the rule), a module in no room, and each circle between rooms."""
    problems: list[str] = []
    between: dict[str, set[str]] = collections.defaultdict(set)
    for edge in sorted(edges, key=lambda e: (e.importer, e.line, e.target)):
        source, target = room_of(edge.importer), room_of(edge.target)
        where = f"{edge.importer}:{edge.line} imports {edge.target}"
        if source is None or target is None:
            missing = edge.importer if source is None else edge.target
            problems.append(f"{where}: {missing} is in no room (add it to SIDES or BASE)")
            continue
        if source == target:
            continue
        between[source.name].add(target.name)
        if source.side is not None and target.side is not None and source.side != target.side:
            problems.append(f"{where}: {source.side} never imports {target.side}")
        elif target.rank > source.rank:
            problems.append(f"{where}: {source.name} may import only rooms below it "
                            f"({order(source.side)})")
    problems += [f"rooms import each other in a circle: {circle}" for circle in _circles(between)]
    return problems


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """One circle through each group of rooms that reach each other, the rest of the group
    named after it."""
    reach = {room: _reachable(graph, room) for room in graph}
    circles: list[str] = []
    seen: set[str] = set()
    for room in sorted(graph):
        if room in seen or room not in reach[room]:
            continue
        group = {other for other in reach[room] if room in reach.get(other, set())}
        seen |= group
        circle = _path(graph, room, group)
        rest = sorted(group - set(circle))
        circles.append(" -> ".join(circle) + (f" (with {', '.join(rest)})" if rest else ""))
    return circles


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The rooms ``start`` reaches by one import or more (itself only through a circle)."""
    found: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        room = todo.pop()
        if room not in found:
            found.add(room)
            todo += graph.get(room, ())
    return found


def _path(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """A shortest way from ``start`` back to itself through ``group``."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        room = todo.pop(0)
        for nxt in sorted(graph.get(room, set()) & group):
            if nxt == start:
                return [*paths[room], start]
            if nxt not in paths:
                paths[nxt] = [*paths[room], nxt]
                todo.append(nxt)
    raise AssertionError(f"{start} does not reach itself")  # the group was built so it does


# -- the tests ------------------------------------------------------------------------------


def test_every_import_points_down_the_rooms() -> None:
    found = modules()
    edges = imports(found)
    assert len(edges) > 300, "the graph came out nearly empty: the reader is broken"
    assert [module for module in found if room_of(module) is None] == []
    problems = violations(edges)
    assert problems == [], "\n".join(problems)


def test_no_two_modules_share_a_name() -> None:
    by_name: dict[str, list[str]] = collections.defaultdict(list)
    for module, path in modules().items():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name[path.stem].append(module)
    assert {name: found for name, found in by_name.items() if len(found) > 1} == {}


def test_a_planted_back_edge_and_circle_are_reported(tmp_path: Path) -> None:
    # A tree of five modules: the screen imports the handlers under TYPE_CHECKING and the
    # front-end's locator inside a function; the handlers import the screen (down: allowed).
    files = {
        "guardian/terminal/screen.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n"
            "    from tether.guardian.rpc.service import Service\n"
            "def late() -> None:\n"
            "    from tether.frontend.guardians import locator\n"
        ),
        "guardian/rpc/service.py": "from ..terminal.screen import late\n",
        "frontend/guardians/locator.py": "import tether.protocol.errors\n",
        "protocol/errors.py": "from tether.shared import paths\n",
        "shared/paths.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges = imports(modules(tmp_path))
    assert sorted((e.importer, e.line, e.target) for e in edges) == [
        ("tether.frontend.guardians.locator", 1, "tether.protocol.errors"),
        ("tether.guardian.rpc.service", 1, "tether.guardian.terminal.screen"),
        ("tether.guardian.terminal.screen", 3, "tether.guardian.rpc.service"),
        ("tether.guardian.terminal.screen", 5, "tether.frontend.guardians.locator"),
        ("tether.protocol.errors", 1, "tether.shared.paths"),
    ]
    assert violations(edges) == [
        "tether.guardian.terminal.screen:3 imports tether.guardian.rpc.service: "
        f"tether.guardian.terminal may import only rooms below it ({order('guardian')})",
        "tether.guardian.terminal.screen:5 imports tether.frontend.guardians.locator: "
        "guardian never imports frontend",
        "tether.protocol.errors:1 imports tether.shared.paths: "
        "tether.protocol may import only rooms below it (protocol < shared)",
        "rooms import each other in a circle: "
        "tether.guardian.rpc -> tether.guardian.terminal -> tether.guardian.rpc",
    ]


def test_a_module_outside_every_room_is_reported() -> None:
    # A new sub-package of a side is in no room until the order names it.
    edges = [Import("tether.guardian.terminal.screen", 7, "tether.elsewhere.thing"),
             Import("tether.frontend.newroom.thing", 3, "tether.protocol.errors")]
    assert violations(edges) == [
        "tether.frontend.newroom.thing:3 imports tether.protocol.errors: "
        "tether.frontend.newroom.thing is in no room (add it to SIDES or BASE)",
        "tether.guardian.terminal.screen:7 imports tether.elsewhere.thing: "
        "tether.elsewhere.thing is in no room (add it to SIDES or BASE)",
    ]
    assert room_of("tether.frontend.usage") == ROOMS["tether.frontend"]
    assert room_of("tether.shared.store.thread_table") == ROOMS["tether.shared"]
