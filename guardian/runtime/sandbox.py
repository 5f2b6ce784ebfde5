"""A kernel sandbox under the main shell of an ``architect`` thread (docs/security.md#profiles-and-modes: no
writes).

The front-end's command check (``frontend/policy/shell_policy.py``) is the first line: it refuses
what the mode does not allow before anything is typed. A parser can be wrong about what bash
will do, so an architect shell also runs inside a sandbox the kernel enforces, set up
between fork and exec by this file run as a script (no Tether import, ``python -I -S``):

- Landlock (Linux 5.13+): no file may be created, written, truncated, renamed, linked or
  removed anywhere, except ``/dev/null`` and its own terminal (and ``/dev/tty``);
  no TCP connect or bind (ABI 4+); no signal to, and no abstract socket of, a process
  outside the sandbox (ABI 6+); no ioctl on a device opened inside it but those (ABI 5+:
  TIOCSTI would type into another terminal). Reading and running programs stay allowed.
- seccomp (x86_64): no socket at all (Landlock does not cover reaching a Unix socket by
  path, such as the guardian's own, and MPTCP or TCP Fast Open reach TCP past it), no
  io_uring, BPF or perf events, and no change of a file's mode, owner, times or extended
  attributes (Landlock guards contents and names only).
- capabilities: a root shell keeps only ``CAP_DAC_READ_SEARCH`` (reading past file modes).

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

# seccomp, x86_64 only (the numbers are per machine; elsewhere the sandbox says it has none).
_AUDIT_ARCH_X86_64 = 0xC000003E
#: Refused with EACCES: sockets of any kind (AF_UNIX reaches sockets by path, which Landlock
#: does not cover; inet ones reach TCP past Landlock through MPTCP or TCP Fast Open, and root's
#: raw and packet sockets the network), io_uring (it makes sockets and opens files without
#: these calls), BPF and perf events (root's kernel-level reach), and every change of a file's
#: mode, owner, times or extended attributes (Landlock guards contents and names only, and
#: root owns the files).
_DENIED_X86_64 = {
    "socket": 41, "socketpair": 53, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "bpf": 321, "perf_event_open": 298,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452,
    "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260,
    "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "setxattrat": 463,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "removexattrat": 466,
}
_IOCTL_X86_64 = 16
#: ioctl commands that change a file's flags (immutable, append-only) or its fs attributes.
_DENIED_IOCTLS = (0x40086602, 0x40046602, 0x401C5820)  # FS_IOC_SETFLAGS, 32-bit, FSSETXATTR
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
    if platform.machine() == "x86_64":
        parts.append("seccomp: no sockets, bpf, perf or mode/owner/time/xattr changes")
    else:
        parts.append(f"no seccomp filter on {platform.machine()}: sockets stay open")
    parts.append("root keeps only reading past file modes")
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
    """The seccomp program: the calls of :data:`_DENIED_X86_64` and the ioctls of
    :data:`_DENIED_IOCTLS` fail with EACCES; a foreign ABI is killed, x32 calls refused."""
    if platform.machine() != "x86_64":
        return None
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    allow, errno = 0x7FFF0000, 0x00050000 | _EACCES
    kill = 0x80000000  # SECCOMP_RET_KILL_PROCESS
    denied = sorted(_DENIED_X86_64.values())
    # Layout: head (6), one jump per denied call, the ioctl test (2 + one per command),
    # then ALLOW and ERRNO; jumps are counted from the next instruction.
    first_deny = 6
    ioctl_at = first_deny + len(denied)
    allow_at = ioctl_at + 2 + len(_DENIED_IOCTLS)
    errno_at = allow_at + 1
    program = [
        (ld_w_abs, 0, 0, 4),                 # 0: seccomp_data.arch
        (jeq_k, 1, 0, _AUDIT_ARCH_X86_64),   # 1
        (ret_k, 0, 0, kill),                 # 2
        (ld_w_abs, 0, 0, 0),                 # 3: seccomp_data.nr
        (jge_k, 0, 1, 0x40000000),           # 4: x32 calls carry bit 30
        (ret_k, 0, 0, errno),                # 5
    ]
    for nr in denied:
        at = len(program)
        program.append((jeq_k, errno_at - at - 1, 0, nr))
    at = len(program)
    program.append((jeq_k, 0, allow_at - at - 1, _IOCTL_X86_64))
    program.append((ld_w_abs, 0, 0, 24))     # args[1] (the command), its low half
    for cmd in _DENIED_IOCTLS:
        at = len(program)
        program.append((jeq_k, errno_at - at - 1, 0, cmd))
    assert len(program) == allow_at
    program += [(ret_k, 0, 0, allow), (ret_k, 0, 0, errno)]
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


_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_DAC_READ_SEARCH = 2
_CAPABILITY_VERSION_3 = 0x20080522


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Leave root (if it is root) only ``CAP_DAC_READ_SEARCH`` (reading past file modes):
    root's other powers are not file writes, and Landlock does not stop them (BPF, network
    configuration, raw sockets, owning every file). The bounding set bounds what the exec
    gives back; the inheritable and ambient sets would add to it."""
    header = ctypes.create_string_buffer(struct.pack("=Ii", _CAPABILITY_VERSION_3, 0), 8)
    data = ctypes.create_string_buffer(24)
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    effective, permitted, _inheritable, eff_hi, perm_hi, _inh_hi = struct.unpack("=6I", data.raw)
    if not (effective or eff_hi or permitted or perm_hi):
        return  # an ordinary user: nothing to drop
    with open("/proc/sys/kernel/cap_last_cap") as last:
        last_cap = int(last.read())
    for cap in range(last_cap + 1):
        if cap != _CAP_DAC_READ_SEARCH and libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"drop capability {cap}")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    cleared = ctypes.create_string_buffer(
        struct.pack("=6I", effective, permitted, 0, eff_hi, perm_hi, 0), 24)
    if libc.capset(header, cleared) != 0:
        raise OSError(ctypes.get_errno(), "capset")


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
    _drop_capabilities(libc)
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
