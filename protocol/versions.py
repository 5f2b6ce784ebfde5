"""Protocol versions and the capability table (docs/protocol.md#handshake,
docs/protocol.md#versions-and-capabilities).

The table is the protocol's history: each minor version adds named capabilities and never
removes one. A guardian started with ``--protocol 1.N`` advertises and honours exactly the
union of the sets up to 1.N. Version gates are written once, here: everything else asks
:func:`capabilities_for` or checks membership in the negotiated set.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class Capability(StrEnum):
    """Named guardian features."""

    EXEC = "exec"
    SCREEN = "screen"
    OBSERVE = "observe"
    WAIT = "wait"
    RECOGNITION = "recognition"
    PROMPT_RECEIPTS = "prompt_receipts"
    #: A person's view of a whole workspace: listing, describing, streaming raw output and
    #: typing from ``tether attach --write`` (recorded as an event, never the keystrokes).
    PERSON_VIEW = "person_view"
    #: A mode stored on each thread (wcgw, architect, code_writer) that outlives front-ends.
    THREAD_MODES = "thread_modes"
    AGENT_LIFECYCLE = "agent_lifecycle"
    #: An architect thread's shell and jobs run in a kernel sandbox (no writes), and a mode
    #: change gives the thread a fresh shell.
    MODE_SANDBOX = "mode_sandbox"
    #: The guardian refuses a line longer than the kernel's line buffer (4095 bytes) typed
    #: into a terminal in cooked mode, instead of letting the kernel cut it.
    LINE_LIMITS = "line_limits"
    #: ``before`` on exec.list and agent.list: the next, older page of a listing (an older
    #: guardian ignores the parameter and would answer with the newest page again).
    LIST_PAGES = "list_pages"
    #: ``replace_draft`` on agent.prompt: a draft in the input box is cleared with the
    #: program's own keys before typing (an older guardian ignores the flag and refuses).
    REPLACE_DRAFT = "replace_draft"
    #: ``env`` on agent.launch: variables for the agent's process and its resumes (an older
    #: guardian ignores them and starts the agent without).
    LAUNCH_ENV = "launch_env"
    #: The turn log: wait cursors are positions in every watched execution's recognized
    #: state changes (``transitions``, ``current``), receipts completed by the guardian, a
    #: managed agent's ``recognition``, and ``cancel`` refusing an agent not in a turn
    #: (``not_busy``).
    TURN_LOG = "turn_log"
    #: Approvals as records: ``agent.approvals`` lists the questions agents ask (normalized
    #: from the screen, with their options and keys), ``agent.respond`` answers one once;
    #: approval notices carry the record.
    APPROVALS = "approvals"
    #: ReadFiles and EditFiles in the guardian: reads with revisions, edits checked against
    #: them and written atomically, each thread's managed temporary directory and the
    #: release of its helpers (docs/tools.md#readfiles, docs/tools.md#editfiles).
    FILES = "files"
    #: ``guardian.upgrade``: the guardian re-executes itself with the installed code (same
    #: process, same children, same terminals) and keeps serving; its hello then reports
    #: the new version and ``code_version``.
    LIVE_UPGRADE = "live_upgrade"


class Version(NamedTuple):
    """A protocol version ``major.minor``."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse ``"1.2"``; raises ValueError with the accepted form."""
        parts = text.split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"protocol version must look like MAJOR.MINOR, got {text!r}")
        return cls(int(parts[0]), int(parts[1]))


MAJOR = 1

#: What each minor version of protocol 1 adds. Append-only.
CAPABILITY_HISTORY: dict[int, frozenset[Capability]] = {
    0: frozenset({Capability.EXEC, Capability.SCREEN}),
    1: frozenset({Capability.OBSERVE, Capability.WAIT}),
    2: frozenset({Capability.RECOGNITION, Capability.PROMPT_RECEIPTS}),
    3: frozenset({Capability.PERSON_VIEW}),
    4: frozenset({Capability.THREAD_MODES}),
    5: frozenset({Capability.AGENT_LIFECYCLE}),
    6: frozenset({Capability.MODE_SANDBOX, Capability.LINE_LIMITS}),
    7: frozenset({Capability.LIST_PAGES}),
    8: frozenset({Capability.REPLACE_DRAFT, Capability.LAUNCH_ENV, Capability.TURN_LOG}),
    9: frozenset({Capability.APPROVALS, Capability.FILES, Capability.LIVE_UPGRADE}),
}

#: The code this build is (the package's version): what a guardian reports as
#: ``code_version`` in its hello and guardian.json, and what ``tether doctor`` compares
#: with the installed one. A guardian that announces none runs code older than this field.
CODE_VERSION = "0.1.0"


def capabilities_for(version: Version) -> frozenset[Capability]:
    """Every capability a guardian speaking ``version`` has."""
    if version.major != MAJOR or version.minor not in CAPABILITY_HISTORY:
        raise ValueError(f"unknown protocol version {version}")
    caps: set[Capability] = set()
    for minor in range(version.minor + 1):
        caps |= CAPABILITY_HISTORY[minor]
    return frozenset(caps)


def current_version(implemented: frozenset[Capability]) -> Version:
    """The highest minor whose capabilities (and all earlier ones) are all implemented."""
    best = 0
    for minor in sorted(CAPABILITY_HISTORY):
        if capabilities_for(Version(MAJOR, minor)) <= implemented:
            best = minor
        else:
            break
    return Version(MAJOR, best)


def minor_introducing(capability: Capability) -> Version:
    """The version that first offered ``capability`` (for upgrade advice)."""
    for minor, caps in sorted(CAPABILITY_HISTORY.items()):
        if capability in caps:
            return Version(MAJOR, minor)
    raise ValueError(f"capability {capability} is in no protocol version")


def known_minor_versions() -> list[Version]:
    """Every version of the current major, oldest first."""
    return [Version(MAJOR, minor) for minor in sorted(CAPABILITY_HISTORY)]
