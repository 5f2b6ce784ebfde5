"""The runtime room assembled: its parts built once, in dependency order, and shut down.

Dependencies point one way: ``scope``, ``live`` and ``notifier`` know nothing else; the
``finisher`` uses them; ``threads`` (main shells) hand finished commands to the finisher;
``launch``, ``inputs`` and ``results`` use threads. Other rooms are handed the parts they
need by their constructors and keep to the parts' methods.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.guardian.history.journal import SpareFile
from tether.guardian.history.retention import Retention
from tether.guardian.runtime.caps import RunningCaps
from tether.guardian.runtime.finish import Finisher
from tether.guardian.runtime.inputs import InputDesk
from tether.guardian.runtime.launch import Launcher
from tether.guardian.runtime.live import LiveTable
from tether.guardian.runtime.notify import ChangeNotifier
from tether.guardian.runtime.outcomes import Results
from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.threads import GUARDIAN_STOPPED, Threads
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths
from tether.shared.segments import OutputSizes
from tether.shared.store.catalog import Catalog


@dataclass(frozen=True, slots=True)
class Runtime:
    """Everything this guardian runs, for one (principal, workspace)."""

    catalog: Catalog
    paths: GuardianPaths
    clock: Clock
    scope: Scope
    notifier: ChangeNotifier
    live: LiveTable
    retention: Retention
    finisher: Finisher
    threads: Threads
    launcher: Launcher
    inputs: InputDesk
    results: Results
    #: The next journal's file, made ahead: the launcher gives it to a new main-shell
    #: command's journal, the finisher makes the next one after that command's reply.
    spare: SpareFile
    #: How many background commands and managed agents may run at once.
    caps: RunningCaps

    @classmethod
    def build(
        cls,
        *,
        catalog: Catalog,
        paths: GuardianPaths,
        principal: str,
        workspace_root: str,
        instance_id: str,
        clock: Clock,
        base_env: dict[str, str],
        mode_sandbox: bool = True,
        files: bool = True,
        caps: RunningCaps | None = None,
        sizes: OutputSizes | None = None,
    ) -> Runtime:
        caps = caps or RunningCaps()
        scope = Scope(catalog, principal=principal, workspace_root=workspace_root)
        notifier = ChangeNotifier()
        # Waiters want persisted changes: whichever commit writes a staged end wakes them.
        catalog.on_staged_written = notifier.notify
        live = LiveTable(paths.journals, catalog.output_figures, sizes)
        retention = Retention(catalog, paths, clock, sizes=live.sizes)
        spare = SpareFile(paths.journals)
        spare.refill()
        finisher = Finisher(catalog=catalog, clock=clock, live=live, notifier=notifier,
                            spare=spare)
        threads = Threads(scope=scope, catalog=catalog, paths=paths, clock=clock,
                          finisher=finisher, notifier=notifier, base_env=base_env,
                          mode_sandbox=mode_sandbox, caps=caps, files=files)
        launcher = Launcher(scope=scope, catalog=catalog, paths=paths, clock=clock,
                            instance_id=instance_id, live=live, threads=threads,
                            finisher=finisher, notifier=notifier, retention=retention,
                            spare=spare, caps=caps)
        return cls(
            catalog=catalog, paths=paths, clock=clock, scope=scope, notifier=notifier,
            live=live, retention=retention, finisher=finisher, threads=threads,
            launcher=launcher, inputs=InputDesk(scope=scope, live=live, threads=threads),
            results=Results(scope=scope, catalog=catalog, live=live, threads=threads,
                            notifier=notifier),
            spare=spare, caps=caps,
        )

    def has_running_work(self) -> bool:
        """True while any command or program runs (a shell idle at its prompt does not)."""
        return bool(self.live) or self.threads.any_busy()

    async def shutdown(self, grace_s: float = 2.0, *, reason: str = GUARDIAN_STOPPED) -> None:
        """Hang up every runtime, record what ended, mark the rest unknown
        (docs/protocol.md#guardians-one-per-key). ``reason``:
        why the shells end, told by the shells that replace them (``threads``)."""
        self.retention.cancel()
        self.threads.hangup_all(reason)
        self.live.hangup_all()
        await self.live.wait_all_done(grace_s)
        for live in self.live:
            self.finisher.finish(live, None, reason="guardian_stopped", status="unknown", now=True)
        self.threads.close_all()
        self.spare.close()
