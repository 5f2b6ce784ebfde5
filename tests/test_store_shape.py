"""The store stays a room of small parts: no class in shared/store/ over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

STORE = Path(__file__).resolve().parents[1] / "shared" / "store"
MAX_CLASS_LINES = 400


def test_no_class_in_the_store_is_over_400_lines() -> None:
    sizes = {f"{path.name}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
             for path in sorted(STORE.glob("*.py"))
             for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)}
    assert sizes, "no class found: the store moved?"
    assert max(sizes.values()) <= MAX_CLASS_LINES, {k: v for k, v in sizes.items()
                                                     if v > MAX_CLASS_LINES}
