"""The project owns its contract: the code cites docs/ (never a document outside the
repository), every cited section exists, and README stays a short guide."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: A citation of the outside specification: "SPEC", "SPEC §6", "R12".
OUTSIDE = re.compile(r"\bSPEC\b(?!_)|(?<![\w\[;])R[0-9]{1,2}\b")
CITED = re.compile(r"docs/([a-z_]+\.md)(?:#([a-z0-9-]+))?")
README_MAX_LINES = 220


def _sources() -> list[Path]:
    """Every tracked text file of the project's own: code, shell scripts, rule files, docs
    (recorded screens under tests/fixtures are the agents' words, not ours)."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                            text=True, check=True).stdout.split()
    # This file names what it looks for.
    return [REPO / name for name in listed
            if name != "tests/test_docs_contract.py" and not name.startswith("tests/fixtures/")
            and b"\0" not in (REPO / name).read_bytes()[:8192]]


def anchors(markdown: str) -> set[str]:
    """The anchors a Markdown renderer gives the headings of ``markdown`` (GitHub's rule:
    lower case, punctuation dropped, spaces to hyphens)."""
    found = set()
    for line in markdown.splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found


def test_no_code_cites_a_document_outside_the_repository() -> None:
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}"
             for path in _sources()
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if OUTSIDE.search(line)]
    assert not found, "cite docs/ instead:\n" + "\n".join(found)


def test_every_cited_docs_section_exists() -> None:
    docs = {path.name: anchors(path.read_text()) for path in (REPO / "docs").glob("*.md")}
    broken = []
    for path in _sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name, anchor in CITED.findall(line):
                if name not in docs or (anchor and anchor not in docs[name]):
                    broken.append(f"{path.relative_to(REPO)}:{number}: docs/{name}#{anchor}")
    assert not broken, "citations of sections docs/ does not have:\n" + "\n".join(broken)


def test_the_checks_find_what_they_look_for() -> None:
    assert OUTSIDE.search("as SPEC §6 says") and OUTSIDE.search("(R12, R13)")
    assert not OUTSIDE.search("ESC[24R") and not OUTSIDE.search("_SPECIAL_LOWERCASE")
    assert anchors("## Close, resume, archive\n### Once only") == {"close-resume-archive",
                                                                  "once-only"}
    assert CITED.findall("see docs/tools.md#retention.") == [("tools.md", "retention")]


def test_readme_is_a_short_guide() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
