"""Guardians on other hosts, reached over SSH (docs/hosts.md#remote-workspaces).

For an ``ssh://`` workspace the front-end makes sure of the host's master connection
(``ssh_link``), runs ``tether remote ensure`` there (which finds or starts the guardian
exactly as a local front-end does, and prints its ``guardian.json``), forwards the guardian's
unix socket to a private local one, and handshakes through it with the same checks as
locally: the guardian's instance id, protocol range, capabilities. Requests then carry the
same deadlines, instance id and idempotency keys over the forward.

The guardian and its terminals do not depend on the link. When the link drops, the
connection's waiting calls fail at once (no reply can come on it); the next call brings the
link back and finds the same guardian.
"""

from __future__ import annotations

import json
from typing import Any

from tether.frontend.guardians.locator import (
    GuardianHandle,
    P,
    R,
    handshake,
    new_client,
)
from tether.frontend.guardians.ssh_link import SshLink, SshSettings, unreachable
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import Method
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths, write_private_file
from tether.shared.ssh_target import RemoteWorkspace, SshHost

#: In a remote workspace's local runtime dir: which workspace and host its socket forwards to.
REMOTE_NOTE = "remote.json"

#: Params that name the calling workspace: rewritten to the path on the host, which is the
#: guardian's own name for its workspace.
_WORKSPACE_PARAMS = ("workspace_root",)


class RemoteGuardianHandle(GuardianHandle):
    """A handshaken connection to a guardian on another host, through a forwarded socket.

    Alive while the host's master connection runs and this connection has not dropped:
    the guardian's own process cannot be watched from here, and a connection that dropped
    is rebuilt by the next call (which finds the guardian again, or its successor)."""

    def __init__(self, paths: GuardianPaths, info: dict[str, Any], *, link: SshLink,
                 target: RemoteWorkspace, remote_root: str, **rest: Any) -> None:
        identity = ProcessIdentity.from_dict(info)
        assert identity is not None  # checked on the host
        super().__init__(paths, info, identity, **rest)
        self.link = link
        self.target = target
        self.remote_root = remote_root
        self.dropped = False

    @property
    def host(self) -> SshHost:
        return self.target.host

    @property
    def workspace_root(self) -> str:
        return self.target.url

    def alive(self) -> bool:
        return not self.dropped and self.link.alive()

    def stopped(self) -> bool:
        # Seen by the host when it handshakes (``tether remote ensure``); a guardian stopped
        # since then is unresponsive at the call's deadline.
        return False

    def watch_exit(self) -> None:
        """Fail this connection's waiting calls the moment it drops: whether the guardian
        acted on them is unknown, and no answer can come back on it."""
        host = self.host.name

        def dropped() -> None:
            self.dropped = True
            self.client.fail_pending(lambda: TetherError(
                ErrorCode.GUARDIAN_UNAVAILABLE,
                f"the SSH connection to {host} was lost while this call waited for its answer",
                {"input_sent": "unknown", "host": host, "connection_lost": True}))

        self.client.on_disconnect(dropped)

    def close(self) -> None:
        self.client.close()

    def unresponsive(self, *, waited_s: float, input_sent: bool | str) -> TetherError:
        sent = "Nothing was sent" if input_sent is False else "Whether the input arrived is unknown"
        return TetherError(
            ErrorCode.GUARDIAN_UNRESPONSIVE,
            f"the guardian of {self.target.url} (pid {self.info.get('pid')} on "
            f"{self.host.name}) did not answer within {waited_s:g}s though the SSH link is up: "
            f"it may be stopped or overloaded there. {sent}, and no other guardian was started.",
            {"host": self.host.name, "pid": self.info.get("pid"), "input_sent": input_sent,
             "waited_s": waited_s})

    async def call(self, method: Method[P, R], params: dict[str, Any], *,
                   timeout_s: float) -> R:
        if params.get("workspace_root") == self.target.url:
            params = {**params, "workspace_root": self.remote_root}
        return await super().call(method, params, timeout_s=timeout_s)


class RemoteGuardians:
    """One SSH link per host, and the guardians reached through them."""

    def __init__(self, config: Config, principal: str) -> None:
        self.config = config
        self.principal = principal
        self._settings: SshSettings | None = None
        self._links: dict[SshHost, SshLink] = {}

    def link(self, host: SshHost) -> SshLink:
        found = self._links.get(host)
        if found is None:
            if self._settings is None:
                self._settings = SshSettings.from_env()
            found = self._links[host] = SshLink(host, self.config, self._settings)
        return found

    async def attach(self, target: RemoteWorkspace, paths: GuardianPaths, *, start: bool,
                     thread_id: str | None) -> RemoteGuardianHandle | None:
        """The workspace's guardian on its host, handshaken through a forward (started
        there when ``start``); None when none runs and ``start`` is false."""
        link = self.link(target.host)
        await link.ensure()
        args = ["remote", "ensure", "--principal", self.principal, "--workspace", target.path]
        if start:
            args.append("--start")
        if thread_id is not None:
            args += ["--thread", thread_id]
        reply = await link.far_end(args)
        if not reply.get("ok"):
            err = TetherError.from_wire(reply.get("error"))
            raise TetherError(err.code, f"on host {target.host.name}: {err.message}",
                              {**err.data, "host": target.host.name})
        info = reply.get("guardian")
        if not isinstance(info, dict):
            return None
        remote_root = str(reply.get("workspace_root") or target.path)
        endpoint = str(info.get("endpoint", ""))
        if not endpoint.startswith("ipc://"):
            raise TetherError(ErrorCode.INTERNAL, f"the guardian on {target.host.name} "
                              f"announced an endpoint that cannot be forwarded: {endpoint!r}")
        await link.forward(paths.socket, endpoint[len("ipc://"):])
        # Says what this socket is (a forward, not a guardian's own): for `tether doctor`.
        write_private_file(paths.runtime / REMOTE_NOTE, json.dumps(
            {"workspace_root": target.url, "host": target.host.name}).encode(), durable=False)
        client = new_client(info, f"ipc://{paths.socket}")
        try:
            greeting = await handshake(client, info, target.url)
        except TetherError as err:
            if err.code != ErrorCode.GUARDIAN_UNAVAILABLE:
                raise
            if not link.alive():
                raise unreachable(target.host, "handshake",
                                  "the master connection ended during the handshake") from None
            raise TetherError(
                ErrorCode.GUARDIAN_UNRESPONSIVE,
                f"the guardian of {target.url} (pid {info.get('pid')} on {target.host.name}) "
                "did not answer its handshake through the SSH forward. Nothing was sent; try "
                "again shortly.", {"host": target.host.name, "input_sent": False}) from None
        if greeting is None:
            return None  # another guardian answered: the next call looks again
        handle = RemoteGuardianHandle(
            paths, info, link=link, target=target, remote_root=remote_root,
            client=client, version=client.version,
            capabilities=frozenset(greeting.capabilities),
            reconciled=list(greeting.lost_records or []))
        if start:
            # The records a guardian started there reconciled are told by whoever started it.
            handle.lost_records = list(reply.get("lost_records") or [])
        return handle

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
