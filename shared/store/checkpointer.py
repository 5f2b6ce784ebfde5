"""The catalog's background checkpointer: the write-ahead log copied into the database
from a thread of its own, instead of inside whichever commit crosses SQLite's threshold."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: How often the background checkpointer looks at the log, and after how many
#: transactions it is woken early (about 20 pages each for a command: ~1000 pages, SQLite's
#: own threshold).
CHECKPOINT_EVERY_S = 1.0
CHECKPOINT_COMMITS = 48
#: Log pages at which a commit checkpoints by itself all the same (SQLite's default: 1000).
CHECKPOINT_VALVE_PAGES = 4000


class Checkpointer:
    """A thread with a connection of its own that runs PASSIVE checkpoints.

    SQLite's calls release the GIL, so the syncs happen beside the event loop. Failures (a
    full disk) are logged and tried again at the next turn; the log keeps every commit
    meanwhile, so nothing is lost, it only grows.
    """

    def __init__(self, writer: sqlite3.Connection, path: Path, every_s: float) -> None:
        self._writer = writer
        self._path = path
        self._every_s = every_s
        self._wake = threading.Event()
        self._stopping = False
        self._commits = 0
        # Started at the first CHECKPOINT_COMMITS transactions: an idle guardian
        # (docs/development.md#benchmarks
        # resident memory) keeps SQLite's own checkpoints and no thread.
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """A transaction was committed (called by the writer)."""
        self._commits += 1
        if self._commits < CHECKPOINT_COMMITS:
            return
        self._commits = 0
        if self._thread is None:
            # From now on commits do not checkpoint, except as a safety valve: should the
            # thread never catch up with a flood of writes (the log restarts only once it is
            # wholly copied when a write begins), a commit checkpoints once the log is this
            # long.
            self._writer.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_VALVE_PAGES}")
            self._thread = threading.Thread(target=self._run, name="catalog-checkpoint",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self._path, isolation_level=None, timeout=10.0)
        except sqlite3.Error as exc:
            log.warning("catalog checkpointer could not open %s: %s", self._path, exc)
            return
        try:
            db.execute("PRAGMA cache_size=-256")  # it only copies pages: little cache
            failing = False
            while not self._stopping:
                self._wake.wait(self._every_s)
                self._wake.clear()
                if self._stopping:
                    break
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:
                    if not failing:  # once per failing spell, not once a second
                        log.warning("catalog checkpoint failed (tried again every %gs): %s",
                                    self._every_s, exc)
                    failing = True
                else:
                    if failing:
                        log.info("catalog checkpoints work again")
                    failing = False
        finally:
            db.close()
