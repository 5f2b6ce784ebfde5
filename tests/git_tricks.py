"""Ways a repository makes git run a program of its choosing: each trick's program writes a
marker file outside the workspace when it runs. Shared by the architect tests."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

#: What each trick's program prints on stderr.
RAN_WORD = "TRICK_PROGRAM_RAN"


@dataclass(frozen=True)
class Trick:
    name: str
    #: ``git config`` pairs set in the repository (the program is "{prog}").
    config: tuple[tuple[str, str], ...]
    #: The read-only command an architect may type.
    command: str
    #: Lines for .gitattributes, a hook to install, or an included config file.
    attributes: str = ""
    hook: str = ""
    included: tuple[tuple[str, str], ...] = ()


TRICKS = (
    Trick("diff_external", (("diff.external", "{prog}"),), "git diff --no-index f g"),
    Trick("textconv_blame", (("diff.tc.textconv", "{prog}"),), "git blame f",
          attributes="f diff=tc"),
    # --textconv after the guard's --no-textconv: the driver itself must be overridden, by
    # its name as the config spells it (a subsection is case-sensitive).
    Trick("textconv_forced", (("diff.TC.textconv", "{prog}"),), "git diff --textconv",
          attributes="f diff=TC"),
    Trick("textconv_log", (("diff.tc.textconv", "{prog}"),), "git log -p -1",
          attributes="f diff=tc"),
    Trick("core_pager", (("core.pager", "{prog}"),), "git log -1"),
    Trick("pager_log", (("pager.log", "{prog}"),), "git log -1"),
    Trick("fsmonitor", (("core.fsmonitor", "{prog}"),), "git status"),
    Trick("clean_filter", (("filter.fl.clean", "{prog}"), ("filter.fl.required", "true")),
          "git diff", attributes="f filter=fl"),
    Trick("diff_driver", (("diff.dd.command", "{prog}"),), "git diff", attributes="f diff=dd"),
    Trick("include_path", (("include.path", "{included}"),), "git log -1",
          included=(("core.pager", "{prog}"),)),
    Trick("gpg_program", (("gpg.program", "{prog}"), ("log.showSignature", "true")),
          "git log -1"),
    Trick("index_hook", (("core.hooksPath", "{hooks}"),), "git status",
          hook="post-index-change"),
)


def prepare(workspace: Path, outside: Path, trick: Trick) -> Path:
    """A repository in ``workspace`` set up for ``trick``; the marker its program writes."""
    marker = outside / f"{trick.name}.ran"
    prog = outside / f"{trick.name}.sh"
    # The marker is a write outside the workspace (which the kernel sandbox stops); the word
    # on stderr, which git passes to the terminal, says it ran even where the write failed.
    prog.write_text(f"#!/bin/sh\necho ran >> '{marker}'\necho {RAN_WORD} >&2\nexit 0\n")
    prog.chmod(0o755)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=workspace, check=True, capture_output=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(outside),
                            "GIT_CONFIG_NOSYSTEM": "1"})

    git("init", "-q")
    git("config", "user.email", "a@example.com")
    git("config", "user.name", "a")
    (workspace / "f").write_text("one\n")
    (workspace / "g").write_text("two\n")
    if trick.attributes:
        (workspace / ".gitattributes").write_text(trick.attributes + "\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    if trick.name == "gpg_program":
        signed = subprocess.run(["git", "cat-file", "commit", "HEAD"], cwd=workspace,
                                check=True, capture_output=True).stdout.decode()
        head, _, body = signed.partition("\n\n")
        fake = ("gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQ==\n"
                " -----END PGP SIGNATURE-----\n")
        made = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"],
                              cwd=workspace, check=True, capture_output=True,
                              input=f"{head}\n{fake}\n{body}".encode()).stdout.decode().strip()
        git("update-ref", "HEAD", made)
    hooks = outside / f"{trick.name}-hooks"
    if trick.hook:
        hooks.mkdir()
        (hooks / trick.hook).symlink_to(prog)
    included = outside / f"{trick.name}.gitconfig"
    for key, value in trick.included:
        git("config", "--file", str(included), key, value.format(prog=prog))
    for key, value in trick.config:
        git("config", key, value.format(prog=prog, included=included, hooks=hooks))
    (workspace / "f").write_text("one\nchanged\n")  # a change to diff, a stale index entry
    return marker
