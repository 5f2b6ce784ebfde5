"""An architect shell's git runs no program that a repository's config or attributes name
(pagers, diff drivers, textconv, filters, fsmonitor, includes, gpg, hooks), with the kernel
sandbox and without it (``sandbox_missing``): each trick, run in wcgw first, does run there."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.git_tricks import RAN_WORD, TRICKS, prepare
from tests.mcp_helpers import initialize, run
from tests.test_modes import change_mode
from tether.guardian.runtime.sandbox import landlock_abi

pytestmark = pytest.mark.anyio

NO_LANDLOCK = Path(__file__).parent / "fakes" / "no_landlock"


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


@pytest.mark.parametrize("kernel_sandbox", [True, False], ids=["sandbox", "sandbox_missing"])
@pytest.mark.timeout(300)
async def test_architect_git_runs_no_program_a_repository_names(
        tether_env: object, workspace: Path, tmp_path: Path, kernel_sandbox: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if kernel_sandbox and landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock")
    if not kernel_sandbox:
        monkeypatch.setenv("PYTHONPATH", str(NO_LANDLOCK))  # the guardian is started below
    from tether.frontend.transport.mcp_server import build_server

    outside = tmp_path / "outside"
    outside.mkdir()
    markers = {}
    for trick in TRICKS:
        repo = workspace / trick.name
        repo.mkdir()
        markers[trick.name] = prepare(repo, outside, trick)
    async with Client(build_server(tether_env)) as client:  # type: ignore[arg-type]
        session = await initialize(client, workspace)
        # wcgw: every trick runs its program (so the check below can fail).
        for trick in TRICKS:
            done = await run(client, session,
                             f"cd {workspace / trick.name} && PAGER=cat {trick.command}", wait=60)
            assert done["status"] == "exited", (trick.name, done)
        ran = sorted(name for name, marker in markers.items() if marker.exists())
        assert ran == sorted(markers), f"tricks that did not run in wcgw: {set(markers) - set(ran)}"
        for marker in markers.values():
            marker.unlink()
        changed = await change_mode(client, session, "architect")
        if kernel_sandbox:
            assert changed["sandbox"].startswith("landlock")
        else:
            assert changed["sandbox"] is None and "Landlock" in changed["sandbox_missing"]
        before = _snapshot(outside)
        for trick in TRICKS:
            done = await run(client, session, f"cd {workspace / trick.name} && {trick.command}",
                             wait=60)
            assert done["status"] == "exited", (trick.name, done)
            assert RAN_WORD not in done["output"], (trick.name, done["output"])
        ran = sorted(name for name, marker in markers.items() if marker.exists())
        assert ran == [], f"programs a repository named ran in architect: {ran}"
        assert _snapshot(outside) == before
        # What architect's git is for still works.
        shown = await run(client, session, f"cd {workspace / 'core_pager'} && git log --oneline -1")
        assert shown["exit_code"] == 0 and "one" in shown["output"]
