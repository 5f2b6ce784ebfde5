"""The operator's Herdr configuration (docs/security.md#herdr-configuration): read, checked
whole, and looked up per principal and workspace.

``TETHER_HERDR_CONFIG`` names a private JSON file; without it the Herdr backend is disabled.
The variable is read once, when the server starts (:meth:`HerdrSettings.from_env`), and the
file on every Herdr call, so an operator's fix applies to the next call without a restart.
``Initialize`` reports only whether the variable is set (:meth:`HerdrSettings.hint`): it
reads no file and runs nothing, so it never claims the configuration is valid.

Every rule the file breaks is ``herdr_disabled`` with ``data.rule`` naming it and a message
that says what to change; no message shows the file's path, a workspace or a terminal id.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_PATH

ENV_VAR = "TETHER_HERDR_CONFIG"
MAX_HERDR_CONFIG_BYTES = 256 * 1024
DEFAULT_DEADLINE_MS = 5000
MIN_DEADLINE_MS = 1
MAX_DEADLINE_MS = 30_000
#: Targets one binding may name (a listing shows them all).
MAX_TARGETS = 32
MAX_BINDINGS = 1024
#: What a caller names a target by: the same shape as an execution id, never one.
ALIAS = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: A Herdr terminal id (``term_abc123``); never starting with ``-``, which Herdr's CLI would
#: take for an option.
TERMINAL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
#: ``local`` over stdio, ``http:<id>`` for a principal of the principals file.
PRINCIPAL_KEY = re.compile(r"local|http:[A-Za-z0-9._-]{1,64}")
_FIELDS = frozenset({"executable", "socket_path", "deadline_ms", "bindings"})
_BINDING_FIELDS = frozenset({"principal_key", "workspace_root", "targets"})
#: What the CLI is given: every inherited ``HERDR_*`` variable goes, this one is set.
SOCKET_VARIABLE = "HERDR_SOCKET_PATH"


def disabled(reason: str, message: str, **detail: Any) -> TetherError:
    """``herdr_disabled``: nothing was sent, and only the operator can change that."""
    return TetherError(ErrorCode.HERDR_DISABLED, message, {
        "operator_action_required": True, "input_sent": False, "reason": reason, **detail})


@dataclass(frozen=True, slots=True)
class Binding:
    """The targets one principal may use in one canonical workspace: alias → terminal id."""

    principal_key: str
    workspace_root: str
    targets: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class HerdrConfig:
    """A configuration file that passed every rule. ``executable`` is the resolved path."""

    executable: str
    socket_path: str
    deadline_ms: int
    bindings: tuple[Binding, ...]

    def binding(self, principal_key: str, workspace_root: str) -> Binding | None:
        """This principal's binding for this canonical workspace, if the operator made one."""
        for binding in self.bindings:
            if (binding.principal_key, binding.workspace_root) == (principal_key, workspace_root):
                return binding
        return None


@dataclass(frozen=True, slots=True)
class HerdrSettings:
    """What the server knows of Herdr at start: the configuration's path (None: disabled)
    and the environment the CLI inherits (the server's own, ``HERDR_*`` removed)."""

    config_path: str | None = None
    base_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HerdrSettings:
        env = os.environ if env is None else env
        inherited = {k: v for k, v in env.items() if not k.startswith("HERDR_")}
        return cls(env.get(ENV_VAR) or None, inherited)

    def hint(self) -> dict[str, Any]:
        """``Initialize``'s ``agent_backends.herdr``: whether the variable is set, no more
        (no file is read and nothing runs; it grants nothing)."""
        if self.config_path is None:
            return {"configuration_present": False, "availability": "disabled",
                    "reason": "configuration_missing"}
        return {"configuration_present": True, "availability": "unknown",
                "reason": "configuration_not_validated"}

    def child_env(self, config: HerdrConfig) -> dict[str, str]:
        """The CLI's environment: no inherited ``HERDR_*``, the configured socket."""
        return {**self.base_env, SOCKET_VARIABLE: config.socket_path}

    def load(self) -> HerdrConfig:
        """Read and check the configuration file; ``herdr_disabled`` naming the rule."""
        if self.config_path is None:
            raise not_configured()
        return parse_config(_read_private(self.config_path))


def not_configured() -> TetherError:
    """``herdr_disabled`` of a server whose operator set no ``TETHER_HERDR_CONFIG``."""
    return disabled("configuration_missing",
                    f"the herdr backend is not configured on this server ({ENV_VAR} is not "
                    "set); ask the operator to configure it (retrying unchanged will not "
                    "help). Nothing was sent.")


def _refuse(rule: str, what: str) -> NoReturn:
    raise disabled("configuration_invalid",
                   f"the Herdr configuration ({ENV_VAR}) is refused: {what}. Ask the operator "
                   "to fix it (retrying unchanged will not help). Nothing was sent.", rule=rule)


def _read_private(path: str) -> bytes:
    try:
        # O_NONBLOCK: a FIFO is refused below instead of hanging the call in open().
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            _refuse("not_regular_file", "the file is a symbolic link; name the file itself")
        _refuse("unreadable", f"the file cannot be opened ({exc.strerror})")
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            _refuse("not_regular_file", "it is not a regular file")
        if st.st_uid != os.getuid():
            _refuse("owner", f"the file is owned by uid {st.st_uid}, not by the server's user "
                             f"(uid {os.getuid()})")
        if st.st_mode & 0o077:
            _refuse("file_mode", f"the file has mode {stat.S_IMODE(st.st_mode):04o}: group or "
                                 "other may read it; it must be private (chmod 600)")
        raw = fh.read(MAX_HERDR_CONFIG_BYTES + 1)
    if len(raw) > MAX_HERDR_CONFIG_BYTES:
        _refuse("file_size", f"the file is larger than {MAX_HERDR_CONFIG_BYTES // 1024} KiB "
                             f"({MAX_HERDR_CONFIG_BYTES} bytes), the limit")
    return raw


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"the key {key!r} appears twice in one object")
        seen[key] = value
    return seen


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def parse_config(raw: bytes) -> HerdrConfig:
    """Check a configuration's bytes against every rule (the file checks are done)."""
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates,
                          parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        _refuse("json", f"it is not valid JSON ({exc})")
    if not isinstance(data, dict):
        _refuse("json", "it is not a JSON object")
    _known_fields(data, _FIELDS, "the top level")
    for name in ("executable", "socket_path", "bindings"):
        if name not in data:
            _refuse("missing_field", f"the field {name!r} is missing")
    executable = _executable(data["executable"])
    socket_path = _text(data["socket_path"], "socket_path")
    if not os.path.isabs(socket_path):
        _refuse("socket_path", "socket_path must be an absolute path")
    deadline = data.get("deadline_ms", DEFAULT_DEADLINE_MS)
    if not isinstance(deadline, int) or isinstance(deadline, bool):
        _refuse("field_type", "deadline_ms must be an integer number of milliseconds")
    if not MIN_DEADLINE_MS <= deadline <= MAX_DEADLINE_MS:
        _refuse("deadline_ms", f"deadline_ms is {deadline}; it must be between "
                               f"{MIN_DEADLINE_MS} and {MAX_DEADLINE_MS}")
    bindings = data["bindings"]
    if not isinstance(bindings, list):
        _refuse("field_type", "bindings must be a list")
    if len(bindings) > MAX_BINDINGS:
        _refuse("bindings", f"there are {len(bindings)} bindings; the limit is {MAX_BINDINGS}")
    parsed = tuple(_binding(index, entry) for index, entry in enumerate(bindings))
    keys = [(b.principal_key, b.workspace_root) for b in parsed]
    for index, key in enumerate(keys):
        if key in keys[:index]:
            _refuse("duplicate_binding", f"bindings[{index}] repeats the principal_key and "
                                         "workspace_root of an earlier binding; merge them")
    return HerdrConfig(executable, socket_path, deadline, parsed)


def _known_fields(data: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        _refuse("unknown_field", f"unknown field {unknown[0]!r} in {where} (the fields are "
                                 f"{', '.join(sorted(allowed))})")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        _refuse("field_type", f"{name} must be a non-empty string")
    if "\0" in value or len(os.fsencode(value)) > MAX_PATH:
        _refuse(name, f"{name} holds a NUL byte or is longer than {MAX_PATH} bytes")
    return value


def _executable(value: Any) -> str:
    path = _text(value, "executable")
    if not os.path.isabs(path):
        _refuse("executable", "executable must be an absolute path")
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        _refuse("executable", f"the executable does not exist or cannot be examined "
                              f"({exc.strerror})")
    if not stat.S_ISREG(st.st_mode):
        _refuse("executable", "the executable is not a regular file")
    if not os.access(real, os.X_OK):
        _refuse("executable", "the executable is not executable by the server's user")
    return real


def _binding(index: int, entry: Any) -> Binding:
    where = f"bindings[{index}]"
    if not isinstance(entry, dict):
        _refuse("field_type", f"{where} must be an object")
    _known_fields(entry, _BINDING_FIELDS, where)
    for name in sorted(_BINDING_FIELDS):
        if name not in entry:
            _refuse("missing_field", f"the field {name!r} is missing in {where}")
    key = entry["principal_key"]
    if not isinstance(key, str) or not PRINCIPAL_KEY.fullmatch(key):
        _refuse("principal_key", f"{where}.principal_key must be 'local' or "
                                 "'http:<principal id>' (the id of the principals file)")
    root = _text(entry["workspace_root"], "workspace_root")
    if not os.path.isabs(root) or os.path.realpath(root) != root:
        _refuse("workspace_root", f"{where}.workspace_root must be a canonical absolute path "
                                  "(symlinks resolved, no trailing slash, no . or ..)")
    targets = entry["targets"]
    if not isinstance(targets, dict):
        _refuse("field_type", f"{where}.targets must be an object of alias: terminal id")
    if not 1 <= len(targets) <= MAX_TARGETS:
        _refuse("targets", f"{where} has {len(targets)} targets; it needs 1 to {MAX_TARGETS}")
    for alias, terminal in targets.items():
        if not ALIAS.fullmatch(alias):
            _refuse("targets", f"a target alias in {where} is not 1-64 of A-Z a-z 0-9 _ -")
        if not isinstance(terminal, str) or not TERMINAL_ID.fullmatch(terminal):
            _refuse("targets", f"the terminal id of target {alias!r} in {where} is not 1-128 "
                               "of A-Z a-z 0-9 _ . : - (not starting with -)")
    return Binding(key, root, dict(targets))
