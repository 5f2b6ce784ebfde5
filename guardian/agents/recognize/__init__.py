"""Turn recognition: is the program in a terminal waiting for input, busy, or asking?

docs/tools.md#recognizers. A *recognizer* is a rule file (``rules/<name>.toml``, one per program: ``claude``,
``codex``, ``opencode``, ``gemini``, ``aider`` and a generic ``shell``) whose rules test
regions of the screen (``regions``) and name a state; ``loader`` documents the format. The
highest-priority matching rule wins; nothing matching is ``unknown`` with a reason.

Public surface::

    recognize(view, recognizer="auto", command=None) -> Recognition
    pick_recognizer(command) -> str          # what "auto" picks
    find_draft(view, recognizer) -> str | None   # the input box's draft line, if any
    available_recognizers() -> tuple[str, ...]

``Recognition`` fields, as ``Execution.explain`` shows them:

- ``state``: ``awaiting_input`` | ``busy`` | ``awaiting_approval`` | ``unknown``.
- ``attention``: for ``awaiting_approval``, what is asked: ``trust`` (a folder), ``login``
  (sign in, or use an API key), ``approval`` (of an action) or ``choice`` (one of several
  options); ``null`` otherwise.
- ``recognizer``: the rule set used; ``rule``/``priority``: the winning rule, if any.
- ``source``: ``rule`` (a rule of the program's recognizer won), ``fallback`` (``auto``
  could not name the program and a generic ``shell`` rule won) or ``none`` (no rule won).
- ``reason`` (stable codes): ``no_rule_matched`` (or the rule file's ``no_match_reason``,
  e.g. ``no_prompt_seen`` for ``shell``), ``blank_screen`` (nothing drawn yet),
  ``rule_declared_unknown`` (an explicit ``unknown`` rule won — authoritative),
  ``program_not_recognized`` / ``no_command`` (why ``auto`` fell back to ``shell``).
- ``evaluated``: every rule tried, ``{rule, priority, state, matched[, evidence]}``.

Errors: ``UnknownRecognizerError`` (a name no rule file defines) and ``RuleFileError`` (a
malformed rule file, naming file and rule) are both ``ValueError``.

Recognition is a heuristic over pixels-as-text: an ``awaiting_input`` verdict is evidence
about the program's lifecycle, never proof that a task finished.
"""

from tether.guardian.agents.recognize.engine import (
    available_recognizers,
    default_rule_sets,
    evaluate,
    find_draft,
    pick_recognizer,
    recognize,
)
from tether.guardian.agents.recognize.loader import Draft, RuleSet, load_rule_dir, parse_rule_file
from tether.guardian.agents.recognize.model import (
    ATTENTIONS,
    STATES,
    Attention,
    Recognition,
    RuleFileError,
    ScreenView,
    State,
    UnknownRecognizerError,
)

__all__ = [
    "ATTENTIONS",
    "STATES",
    "Attention",
    "Draft",
    "Recognition",
    "RuleFileError",
    "RuleSet",
    "ScreenView",
    "State",
    "UnknownRecognizerError",
    "available_recognizers",
    "default_rule_sets",
    "evaluate",
    "find_draft",
    "load_rule_dir",
    "parse_rule_file",
    "pick_recognizer",
    "recognize",
]
