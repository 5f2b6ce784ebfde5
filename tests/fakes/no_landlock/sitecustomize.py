"""On PYTHONPATH, makes a guardian see a kernel without Landlock (``sandbox_missing``): its
architect shells then run without the kernel sandbox, on the command check alone."""

from __future__ import annotations

try:
    from tether.guardian.runtime import sandbox

    sandbox.landlock_abi = lambda: 0
except Exception:  # any other Python on this path (a shell's) is left alone
    pass
