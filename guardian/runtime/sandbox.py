"""A kernel sandbox under the main shell of an ``architect`` thread (R27: no writes).

The front-end's command check (``frontend/shell_policy.py``) is the first line: it refuses
what the mode does not allow before anything is typed. A parser can be wrong about what bash
will do, so an architect shell also runs inside a sandbox the kernel enforces, set up
between fork and exec by this file run as a script (no Tether import, ``python -I -S``):

- Landlock (Linux 5.13+): no file may be created, written, truncated, renamed, linked or
  removed anywhere, except ``/dev/null`` and its own terminal (and ``/dev/tty``);
  no TCP connect or bind (ABI 4+); no signal to, and no abstract socket of, a process
  outside the sandbox (ABI 6+); no ioctl on a device opened inside it but those (ABI 5+:
  TIOCSTI would type into another terminal). Reading and running programs stay allowed.
- seccomp: no new ``AF_UNIX`` socket (Landlock does not cover connecting to a socket by
  path: the guardian's own, an ssh agent, docker) and no io_uring (which makes sockets
  without the ``socket`` call).

Both last for the shell's life and pass to every process it starts; a mode change gives the
thread a fresh shell (``Threads.set_mode``). Where the kernel offers no Landlock, the shell
runs without it and the mode says so (``sandbox`` is None, with the reason).

The wrapper also opens the shell's rc file, unlinks it (as the rc would do itself, but the
sandbox forbids it) and hands it to bash as ``/dev/fd/N``, which the rc closes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

#: Where the rc file is handed to bash.
RC_FD = 63

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every arch
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Landlock filesystem rights (include/uapi/linux/landlock.h).
_WRITE_FILE = 1 << 1
_REMOVE_DIR, _REMOVE_FILE = 1 << 4, 1 << 5
_MAKE_CHAR, _MAKE_DIR, _MAKE_REG, _MAKE_SOCK = 1 << 6, 1 << 7, 1 << 8, 1 << 9
_MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = 1 << 10, 1 << 11, 1 << 12
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

# seccomp: (audit arch, socket, io_uring_setup) per machine.
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}
_AF_UNIX = 1
_EACCES = 13


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when it has none (or it is disabled)."""
    try:
        abi = int(_libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_CREATE_RULESET_VERSION)))
    except (OSError, AttributeError):
        return 0
    return max(abi, 0)


def describe() -> tuple[str | None, str | None]:
    """(what an architect shell runs in, why not) for this kernel: one of them is None."""
    abi = landlock_abi()
    if abi < 1:
        return None, ("this kernel offers no Landlock (Linux 5.13+ with landlock in its LSM "
                      "list); architect is enforced by the command check alone")
    parts = [f"landlock abi {abi}: no file writes except /dev/null and its own terminal"]
    if abi >= 4:
        parts.append("no TCP")
    if abi >= 6:
        parts.append("no signals out")
    if platform.machine() in _SECCOMP_ARCH:
        parts.append("seccomp: no unix sockets")
    return ", ".join(parts), None


def wrap(argv: list[str], rc_path: str | None = None) -> list[str]:
    """``argv`` started inside this sandbox; ``rc_path``: a file to hand over at
    :data:`RC_FD` (and unlink), which ``argv`` names as ``/dev/fd/63``."""
    rc = ["--rc", rc_path] if rc_path is not None else []
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), *rc, "--", *argv]


def _fs_rights(abi: int) -> int:
    rights = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG
              | _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    if abi >= 5:
        rights |= _IOCTL_DEV
    return rights


def _restrict_files(libc: ctypes.CDLL, abi: int) -> None:
    handled = _fs_rights(abi)
    attr = struct.pack("=Q", handled)
    if abi >= 4:
        attr += struct.pack("=Q", _NET_BIND_TCP | _NET_CONNECT_TCP)
    if abi >= 6:
        attr += struct.pack("=Q", _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    file_rights = _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0) | (_IOCTL_DEV if abi >= 5 else 0)
    # Its own terminal only: another thread's could be written to (a forged screen for
    # whoever reads it), or, as root, typed into with TIOCSTI, which needs only a read-only
    # descriptor: hence ioctls on devices are handled too (ABI 5+).
    try:
        own = [os.ttyname(0)]
    except OSError:
        own = []
    for path, rights in (("/dev/null", file_rights), ("/dev/tty", file_rights),
                         *((tty, file_rights) for tty in own)):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # no such device here: nothing to allow
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        added = libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), rule,
                             ctypes.c_uint32(0))
        os.close(fd)
        if added < 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    os.close(ruleset)


def _filter() -> bytes | None:
    """A seccomp program: socket(AF_UNIX, ...) and io_uring_setup fail with EACCES."""
    machine = _SECCOMP_ARCH.get(platform.machine())
    if machine is None:
        return None
    arch, nr_socket, nr_uring = machine
    ld_w_abs, jeq_k, jge_k, ja, ret_k = 0x20, 0x15, 0x35, 0x05, 0x06
    allow, errno = 0x7FFF0000, 0x00050000 | _EACCES
    kill = 0x80000000  # SECCOMP_RET_KILL_PROCESS: a foreign ABI (i386) is not ours
    # x86_64's x32 calls carry bit 30 in their number: refused, they would dodge the checks.
    x32 = (jge_k, 0, 1, 0x40000000) if arch == 0xC000003E else (ja, 0, 0, 1)
    program = [
        (ld_w_abs, 0, 0, 4),   # 0: seccomp_data.arch
        (jeq_k, 1, 0, arch),   # 1
        (ret_k, 0, 0, kill),   # 2
        (ld_w_abs, 0, 0, 0),   # 3: seccomp_data.nr
        x32,                   # 4
        (ret_k, 0, 0, errno),  # 5
        (jeq_k, 0, 1, nr_uring),  # 6
        (ret_k, 0, 0, errno),  # 7
        (jeq_k, 0, 3, nr_socket),  # 8: else allow (12)
        (ld_w_abs, 0, 0, 16),  # 9: args[0], its low half (little-endian)
        (jeq_k, 0, 1, _AF_UNIX),  # 10
        (ret_k, 0, 0, errno),  # 11
        (ret_k, 0, 0, allow),  # 12
    ]
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


def _restrict_sockets(libc: ctypes.CDLL) -> None:
    code = _filter()
    if code is None:
        return
    insns = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("@HP", len(code) // 8, ctypes.addressof(insns))  # struct sock_fprog
    buf = ctypes.create_string_buffer(prog, len(prog))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, buf, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")


def _main(args: list[str]) -> None:
    if args[:1] == ["--rc"]:
        rc = os.open(args[1], os.O_RDONLY)
        os.dup2(rc, RC_FD, inheritable=True)
        os.close(rc)
        os.unlink(args[1])  # the rc would delete itself; inside the sandbox it cannot
        args = args[2:]
    sep, argv = args[0], args[1:]
    if sep != "--" or not argv:
        raise OSError(22, "usage: sandbox.py [--rc FILE] -- ARGV...")
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    abi = landlock_abi()
    if abi >= 1:
        _restrict_files(libc, abi)
    _restrict_sockets(libc)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    try:
        _main(sys.argv[1:])
    except OSError as exc:  # the shell never starts unconfined by mistake
        print(f"tether sandbox: {exc}", file=sys.stderr)
        sys.exit(126)
