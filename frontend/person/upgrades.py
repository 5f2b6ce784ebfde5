"""``tether guardians upgrade``: hand a running guardian over to the installed code, keeping
every terminal (docs/protocol.md#live-upgrade).

A guardian that speaks ``live_upgrade`` re-executes itself: the same process, its children,
terminals, instance id and token. One too old to do that is only named, with what a restart
would end, until ``--restart --yes`` restarts it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from tether.frontend.guardians.health import restart_for
from tether.frontend.guardians.locator import ask, read_info
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import GUARDIAN_UPGRADE, HELLO
from tether.protocol.results import HelloResult, UpgradeResult
from tether.protocol.transport import GuardianClient
from tether.protocol.versions import MAJOR, known_minor_versions
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths
from tether.shared.store.store_errors import StoreError
from tether.shared.store.view import running_by_kind

#: The status :func:`upgrade` returns when the caller should restart the guardian (too old
#: to hand itself over, and ``--restart --yes`` was given).
RESTART_ASKED = 3
#: How long the new code may take from the hand-over to its first answer.
TAKEOVER_WAIT_S = 30.0
TAKEOVER_POLL_S = 0.005


@dataclass(frozen=True)
class Outcome:
    """What ``upgrade`` did to one guardian: an exit status and the sentence saying it."""

    status: int
    text: str
    #: From the request to the new code's first answer (a hand-over that happened).
    handoff_ms: int | None = None


def restart_would_end(paths: GuardianPaths, info: dict[str, Any]) -> str:
    """What stopping the guardian would end, in words: its running executions, agents and
    background commands (from its catalog, read-only)."""
    try:
        kinds = running_by_kind(paths.catalog, str(info["instance_id"]))
    except (StoreError, OSError):
        return "its running executions (their number could not be read)"
    total = sum(kinds.values())
    return (f"{total} running execution{'s' if total != 1 else ''} "
            f"({kinds.get('agent', 0)} managed agent{'s' if kinds.get('agent', 0) != 1 else ''}, "
            f"{kinds.get('background', 0)} background command"
            f"{'s' if kinds.get('background', 0) != 1 else ''}, "
            f"{kinds.get('command', 0)} command{'s' if kinds.get('command', 0) != 1 else ''} in "
            "main shells) and every thread's shell")


async def _hello(info: dict[str, Any]) -> HelloResult | None:
    """The guardian's hello on a connection of its own, or None when it does not answer."""
    latest = known_minor_versions()[-1]
    client = GuardianClient(info["endpoint"], info["auth_token"], version=latest,
                            instance_id=info["instance_id"])
    try:
        reply = await client.call(HELLO.name, {"client_min": [MAJOR, 0],
                                               "client_max": [latest.major, latest.minor]},
                                  timeout_s=2.0, resendable=True)
        return HelloResult.model_validate(reply)
    except TetherError:
        return None
    finally:
        client.close()


async def upgrade(paths: GuardianPaths, root: str, *, dry_run: bool = False,
                  restart: bool = False, yes: bool = False) -> Outcome:
    """Hand the guardian of ``root`` over to the installed code (see the module)."""
    info = read_info(paths)
    ident = ProcessIdentity.from_dict(info) if info else None
    if info is None or ident is None or not ident.alive():
        return Outcome(0, f"no guardian is running for {root}; the next tool call there starts "
                       "one with the installed code")
    if await _hello(info) is None:
        return Outcome(2, f"the guardian of {root} (pid {info['pid']}) does not answer; "
                       f"`tether doctor` says more, `{restart_for(info, root)}` replaces it")
    client = GuardianClient(info["endpoint"], info["auth_token"],
                            version=known_minor_versions()[-1], instance_id=info["instance_id"])
    asked = time.monotonic()
    try:
        # Asked whatever protocol the guardian speaks: a guardian of this version on serves
        # it even when told to speak an older one; an older build does not know it.
        result = await _answer_or_announced(paths, info, ask(
            client, GUARDIAN_UPGRADE, {"reason": "tether guardians upgrade",
                                       "dry_run": dry_run}, timeout_s=60))
    except TetherError as err:
        if err.code == ErrorCode.UPGRADE_FAILED:
            return Outcome(1, f"upgrade_failed: {err.message}")
        if err.code not in (ErrorCode.UNKNOWN_METHOD, ErrorCode.CAPABILITY_MISSING):
            raise
        ends = restart_would_end(paths, info)
        if restart and yes:
            return Outcome(RESTART_ASKED, f"restarting it ends {ends}")
        return Outcome(2, (
            f"The guardian of {root} (pid {info['pid']}, protocol {info.get('protocol')}) is "
            "too old to hand itself over to the installed code (it does not know "
            "guardian.upgrade). Only a restart upgrades it, and a restart ends "
            f"{ends}; their records stay readable. To restart it: "
            f"`tether guardians upgrade --workspace {root} --restart --yes`."))
    finally:
        client.close()
    if not result.handing_over:
        return Outcome(0, (
            f"dry run: the installed code ({result.to_code_version}) can take over the "
            f"guardian of {root} (pid {info['pid']}, code {result.from_code_version}, "
            f"protocol {result.from_protocol}) with its {len(result.executions)} running "
            f"executions; its dry run took {result.dry_run_ms} ms. Nothing changed."))
    hello = await _taken_over(info, result.to_code_version, paths)
    took_ms = int((time.monotonic() - asked) * 1000)
    if hello is None:
        return Outcome(1, (
            f"the guardian of {root} (pid {info['pid']}) began handing itself over to "
            f"code {result.to_code_version} but did not answer with it within "
            f"{TAKEOVER_WAIT_S:g}s; see {paths.log}. `tether doctor` says what runs."))
    return Outcome(0, (
        f"upgraded the guardian of {root}: pid {info['pid']} (the same process, instance "
        f"{info['instance_id']}) now runs code {hello.code_version}, protocol "
        f"{hello.guardian_protocol} (was {result.from_code_version}, protocol "
        f"{result.from_protocol}); its {len(result.executions)} running executions went "
        f"on; {took_ms} ms from the request to its first answer."), took_ms)


async def _answer_or_announced(paths: GuardianPaths, info: dict[str, Any],
                               asking: Awaitable[UpgradeResult]) -> UpgradeResult:
    """The guardian's answer to ``guardian.upgrade``, or, should that answer be lost as its
    old code closes the connection, what the new code's guardian.json says it handed over."""
    call = asyncio.ensure_future(asking)
    try:
        while not call.done():
            await asyncio.wait({call}, timeout=TAKEOVER_POLL_S * 10)
            now = read_info(paths) if not call.done() else None
            if (now is not None and now["instance_id"] == info["instance_id"]
                    and now.get("upgraded_unix_ms") is not None
                    and now.get("upgraded_unix_ms") != info.get("upgraded_unix_ms")):
                await asyncio.wait({call}, timeout=1.0)  # its answer may still come
                if call.done():
                    break
                return UpgradeResult.model_validate({
                    "handing_over": True,
                    "from_code_version": str(info.get("code_version") or "unknown"),
                    "to_code_version": str(now.get("code_version") or "unknown"),
                    "from_protocol": str(info.get("protocol") or "unknown"),
                    "executions": [], "dry_run_ms": 0})
        return call.result()
    finally:
        call.cancel()


async def _taken_over(info: dict[str, Any], code_version: str,
                      paths: GuardianPaths) -> HelloResult | None:
    """Wait for the same guardian instance to announce ``code_version`` after a live
    upgrade (its guardian.json written again), then for its first answer (None: not within
    :data:`TAKEOVER_WAIT_S`). Nothing is sent before it announces itself: a request sent while
    the old code closes its socket would be lost with it."""
    deadline = time.monotonic() + TAKEOVER_WAIT_S
    while time.monotonic() < deadline:
        now = read_info(paths)
        if (now is not None and now["instance_id"] == info["instance_id"]
                and now.get("code_version") == code_version
                and now.get("upgraded_unix_ms") is not None
                and now.get("upgraded_unix_ms") != info.get("upgraded_unix_ms")):
            break
        await asyncio.sleep(TAKEOVER_POLL_S)
    else:
        return None
    while time.monotonic() < deadline:
        hello = await _hello(info)
        if hello is not None and hello.code_version == code_version:
            return hello
        await asyncio.sleep(TAKEOVER_POLL_S)
    return None
