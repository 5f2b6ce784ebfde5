"""The ``tether`` console script: routes each subcommand to the package that owns it.

Subcommands are imported by name only when used, so ``tether serve`` never loads the
guardian and ``tether guardian`` never loads the MCP stack.
"""

from __future__ import annotations

import gc
import importlib
import os
import select
import sys
from types import ModuleType

#: Exit status when the reader of stdout went away (``tether ls | head -1``): 128 + SIGPIPE,
#: what a shell reports for coreutils killed by SIGPIPE in the same place, so a script with
#: ``set -o pipefail`` sees ``tether`` exactly as it sees ``cat`` or ``seq`` there.
EXIT_BROKEN_PIPE = 141

#: subcommand -> (module with a ``main(argv)`` — or ``module:function`` — , one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("tether.frontend.transport.serve", "run the MCP server (stdio, or --http)"),
    "guardian": ("tether.guardian.main", "run a guardian in the foreground"),
    "guardians": ("tether.frontend.person.admin", "list, inspect, stop or restart guardians"),
    "ls": ("tether.frontend.person.ls", "guardians, threads and executions as a table"),
    "show": ("tether.frontend.person.show", "one execution: record, recognition, receipts, events"),
    "tail": ("tether.frontend.person.tail", "an execution's retained output; -f follows it"),
    "attach": ("tether.frontend.person.attach", "watch (or with --write, type into) a terminal"),
    "doctor": ("tether.frontend.person.doctor", "check versions, dirs, guardians and logs"),
    "report": ("tether.frontend.person.report", "summarise a usage log (TETHER_USAGE_LOG)"),
    "agents": ("tether.frontend.person.agents", "list, detach or archive a workspace's agents"),
    "approvals": ("tether.frontend.person.approvals", "the questions agents wait on, as a table"),
    "approve": ("tether.frontend.person.approvals:approve", "answer one approval with yes"),
    "deny": ("tether.frontend.person.approvals:deny", "answer one approval with no"),
    "hosts": ("tether.frontend.person.hosts", "check, install on, or list hosts reached over SSH"),
    "remote": ("tether.frontend.guardians.far_end", "(run over SSH by a front-end elsewhere)"),
}


def usage() -> str:
    lines = ["usage: tether <command> [options]", "       tether --version", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return run(sys.argv[1:] if argv is None else argv)
        finally:
            # A closed pipe shows here, where it is handled, not in the interpreter's final
            # flush (also after argparse's --help, which leaves by SystemExit).
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise  # another pipe broke: that is a failure to show, not a reader that left
        return quiet_broken_pipe()


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll reports an error on
    it), rather than any other pipe of the process."""
    if sys.stdout is None:
        return False
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):  # no descriptor (replaced by a test), or already closed
        return False


def run(args: list[str]) -> int:
    """Route ``args`` to the subcommand's ``main``; its exit status."""
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] in ("-V", "--version"):
        print(f"tether {version()}")
        return 0
    entry = SUBCOMMANDS.get(args[0])
    if entry is None:
        print(f"tether: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    name, _, function = entry[0].partition(":")
    module = import_frozen(name)
    result: int = getattr(module, function or "main")(args[1:])
    return result


def quiet_broken_pipe() -> int:
    """Leave quietly after the reader of stdout went away, as coreutils do (Python ignores
    SIGPIPE, so the write raised instead of ending the process).

    Whatever is still buffered for stdout can never be written: stdout is pointed at
    /dev/null so that the interpreter's final flush does not raise again (and print
    "Exception ignored ... BrokenPipeError" on stderr).
    """
    if sys.stdout is not None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    return EXIT_BROKEN_PIPE


def version() -> str:
    """The installed package's version (what a bug report needs first)."""
    from importlib import metadata  # here: `tether guardian` never pays for importing it

    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed as a package)"


def import_frozen(name: str) -> ModuleType:
    """Import a subcommand's module with the cyclic collector paused, then freeze what it built.

    Start-up builds ~140k objects that live as long as the process (modules, classes, pydantic
    and MCP schemas). The collector walked them again and again while they were being built
    (~50 ms of a ~0.75 s ``tether serve`` start, measured), and would walk them again at every
    full collection for the life of the process (~40 ms each: a long-lived front-end's worst
    call). Frozen, they are out of its way. The few cycles start-up leaves behind as garbage
    (~1.6k objects) are kept instead of collected.
    """
    gc.disable()
    try:
        return importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()


if __name__ == "__main__":
    sys.exit(main())
