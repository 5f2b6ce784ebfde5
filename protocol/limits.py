"""Every id pattern, limit and timeout that more than one module relies on, defined once.

Both sides read these: the front-end checks a limit before sending, so a request over it never
reaches the guardian, and the guardian checks it again (docs/tools.md#records, docs/tools.md). A number that
appears in
a tool schema, a params model, a guardian check and a person's report is named here, so the
four cannot drift apart.
"""

from __future__ import annotations

import re

# -- the wire --------------------------------------------------------------------------------

#: What one msgpack frame may hold (``codec.DecodeLimits``): every decoder, the front-end's
#: and the guardian's, refuses more. What the guardian sends is sized against them
#: (``MAX_PAGE_TEXT_RATIO``), so a legal request never gets a reply its reader must refuse.
MAX_FRAME_BYTES = 4 * 1024 * 1024
MAX_FRAME_STR_BYTES = 1024 * 1024
MAX_FRAME_BIN_BYTES = 2 * 1024 * 1024
MAX_FRAME_ARRAY_LEN = 4096
MAX_FRAME_MAP_LEN = 256
MAX_FRAME_DEPTH = 16

# -- ids -------------------------------------------------------------------------------------

#: Thread, execution and attach ids (and the ids a client may name them by).
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
#: Recognizer names: ``auto``, ``shell``, or a rule file's name.
RECOGNIZER_PATTERN = r"^[a-z0-9_-]{1,32}$"
#: A client's prompt id (unique per execution).
PROMPT_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
MAX_IDEMPOTENCY_KEY = 128
MAX_PRINCIPAL = 128
MAX_PATH = 4096
MAX_CURSOR = 1024

# -- what may be typed -----------------------------------------------------------------------

#: Sizes of what is typed are UTF-8 bytes (docs/tools.md, docs/tools.md#prompts), not characters: "€" is 3
#: bytes.
MAX_COMMAND_BYTES = 64 * 1024
MAX_TEXT_BYTES = 64 * 1024
MAX_KEYS = 64
MAX_PROMPT_BYTES = 16 * 1024
#: The longest line ``send_text`` types into a program that reads whole lines (the terminal
#: in canonical mode, ``ICANON`` on). Linux's line discipline (N_TTY, drivers/tty/n_tty.c)
#: buffers at most N_TTY_BUF_SIZE = 4096 bytes and keeps the last one for the line's end, so
#: a line holds 4095 bytes: the bytes typed past that, up to the newline, are dropped
#: without a trace. Raw-mode programs (editors, agent TUIs) read keys as they come and have
#: no such limit.
MAX_CANONICAL_LINE_BYTES = 4095

# -- terminals -------------------------------------------------------------------------------

MIN_ROWS, MAX_ROWS = 2, 500
MIN_COLS, MAX_COLS = 10, 1000
DEFAULT_ROWS, DEFAULT_COLS = 40, 120

# -- integers on the wire --------------------------------------------------------------------

#: Upper bound of a generation and of any count the guardian range-checks itself: every
#: integer on the wire has a range, so none can overflow msgpack (64 bits) on either side.
MAX_GENERATION = 2**31 - 1
MAX_WIRE_INT = 2**31 - 1
#: Absolute journal offsets grow past 2**31 on long-lived executions; JSON-safe bound.
MAX_OFFSET = 2**53

# -- listing, paging, observing --------------------------------------------------------------

DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 128
#: A listed record carries the first this many characters of its command (``get`` has it
#: whole): 128 records of 64 KiB commands and 64 KiB screens made a reply no frame holds.
LIST_COMMAND_CHARS = 1024
#: A listing stops before its records pass this many bytes (then ``next_before`` goes on):
#: room under the frame limit for the envelope, and for what the front-end adds per record.
LIST_REPLY_BYTES = 3 * 1024 * 1024
#: Pages of ``exec.read`` and of each ``exec.observe`` item.
MIN_PAGE_BYTES, MAX_PAGE_BYTES = 4, 64 * 1024
DEFAULT_PAGE_BYTES = 16 * 1024
DEFAULT_OBSERVE_PAGE_BYTES = 2048
#: A page's rendered text is at most this many times its ``page_bytes``, in UTF-8 bytes.
#: Rendering can expand (a column jump pads its line with spaces: ``ESC[500Gx`` is 9 bytes
#: and 500 characters); a page whose text would grow past this stops early, with
#: ``has_more``. The largest page then fits one string of a frame (``MAX_FRAME_STR_BYTES``)
#: and the largest observe, all its pages together, an eighth of a frame (MAX_FRAME_BYTES).
MAX_PAGE_TEXT_RATIO = 8
MAX_OBSERVE_ITEMS = 32
#: Sum of the page sizes of one ``exec.observe``.
MAX_OBSERVE_BUDGET = 64 * 1024
MAX_WAIT_IDS = 32
MAX_WORKSPACE_LIST = 1000
MAX_STREAM_BYTES = 1024 * 1024

# -- waits (milliseconds on the wire) --------------------------------------------------------

#: ``wait_ms`` of exec.start/status/input and ``timeout_ms`` of exec.wait_turn.
MAX_WAIT_MS = 60_000
#: What a BashCommand waits when the client names no ``wait_for_seconds``.
DEFAULT_WAIT_MS = 5_000
#: After typing (send_text, send_keys) the answer waits at most this long.
MAX_INPUT_WAIT_MS = 5_000
#: ``timeout_ms`` of exec.observe and exec.wait.
MAX_OBSERVE_WAIT_MS = 30_000
MAX_QUIET_MS = 10_000
MAX_PROMPT_WAIT_MS = 30_000
MAX_STREAM_WAIT_MS = 30_000
MAX_STREAM_LINGER_MS = 100

# -- the front-end's patience (seconds) ------------------------------------------------------

#: Time an RPC may take beyond the wait it asked for (delivery, rendering, transport).
RPC_SLACK_S = 10.0
#: A bookkeeping RPC with no wait of its own (reading or setting a thread's mode).
MODE_RPC_TIMEOUT_S = 5.0

#: Entries in a code_writer mode's allowed_commands or allowed_globs.
MAX_MODE_ENTRIES = 256

# -- retention (docs/tools.md#retention) --------------------------------------------------------------------

#: Per thread: records kept, bytes of output + screen text kept, and how long a terminal
#: record lives. The guardian enforces them; ``tether doctor`` reports against them.
THREAD_MAX_RECORDS = 128
THREAD_MAX_BYTES = 16 * 1024 * 1024
RECORD_TTL_MS = 24 * 3600 * 1000
#: Raw output kept per execution: its last this many bytes (the journal's rolling window)...
EXECUTION_RETAIN_BYTES = 1024 * 1024
#: ... and its first this many (where a build log's first error usually is); the bytes
#: between the two are dropped, and a read that crosses them reports the gap. Both are
#: configurable (TETHER_OUTPUT_TAIL_BYTES, TETHER_OUTPUT_HEAD_BYTES: shared/config.py),
#: within these bounds.
EXECUTION_HEAD_BYTES = 64 * 1024
MIN_RETAIN_BYTES, MAX_RETAIN_BYTES = 4 * 1024, 256 * 1024 * 1024
MAX_HEAD_BYTES = 64 * 1024 * 1024

# -- what runs at once -----------------------------------------------------------------------

#: Background commands and managed agents running at once, per thread and per guardian.
#: Each holds a terminal of the host and about three of the guardian's descriptors, so one
#: client starting jobs in a loop would otherwise run the host out of both for everyone.
#: A start over either is ``limit_exceeded`` before anything starts. Configurable
#: (TETHER_MAX_RUNNING_PER_THREAD, TETHER_MAX_RUNNING_PER_GUARDIAN: shared/config.py), from
#: 1 to MAX_RUNNING_CONFIGURED. A command typed into a thread's main shell runs in the
#: shell's terminal and does not count.
MAX_RUNNING_PER_THREAD = 64
MAX_RUNNING_PER_GUARDIAN = 256
MAX_RUNNING_CONFIGURED = 100_000
#: Descriptors a guardian keeps free for answering (a read opens a journal file, a client
#: connects, the catalog opens its files): a start that would leave fewer is refused as
#: ``resource_exhausted``, before anything starts.
DESCRIPTOR_RESERVE = 32

# -- managed agents (docs/tools.md#managed-agents)
# ----------------------------------------------------------------

#: Label keys (``tether.open.<client-id>`` among them) and provider conversation ids.
LABEL_KEY_PATTERN = r"^[A-Za-z0-9._:/-]{1,128}$"
CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
MAX_ARGV = 256
#: A launch's whole argv, measured by :func:`argv_bytes`.
MAX_ARGV_BYTES = 64 * 1024
#: ``Agent.launch {env}``: how many variables, and their names' and values' bytes in all.
MAX_ENV_VARS = 64
MAX_ENV_BYTES = 32 * 1024
MAX_LABELS = 64
MAX_LABEL_VALUE = 1024
MAX_TITLE = 200
MAX_CANCEL_WAIT_MS = 30_000
DEFAULT_CANCEL_WAIT_MS = 10_000
MAX_AGENT_LIST = 500
DEFAULT_AGENT_LIST = 100
MAX_NOTIFICATIONS = 500
MAX_NOTIFICATION_WAIT_MS = 30_000
#: Approvals (docs/tools.md#approvals): how many a listing returns at most (and by default),
#: how many each execution keeps (the oldest resolved ones go first), how long ``respond``
#: waits for the screen to leave the question, and what a choice may be (``approve``,
#: ``deny`` or an offered option's key: a digit, a letter, a key name).
MAX_APPROVAL_LIST = 500
DEFAULT_APPROVAL_LIST = 50
MAX_APPROVALS_PER_EXECUTION = 64
MAX_RESPOND_WAIT_MS = 30_000
DEFAULT_RESPOND_WAIT_MS = 5_000
CHOICE_PATTERN = r"^[A-Za-z0-9_+-]{1,32}$"
#: How long a lifecycle request may take (launch, resume, close and archive wait for
#: processes to start or end; an archive cascade closes a whole tree).
AGENT_RPC_TIMEOUT_S = 30.0
#: A front-end's own process and its ancestors sent to find its parent execution
#: (docs/tools.md#trees-and-parents).
MAX_ANCESTORS = 64


# -- files (docs/tools.md#readfiles, docs/tools.md#editfiles) -------------------------------

#: Path specs in one ReadFiles, and edits in one EditFiles.
MAX_READ_PATHS = 32
MAX_EDITS = 32
#: What one ReadFiles returns: at most this many bytes of one file, and of all its files
#: together (the reply carries the text twice: raw, and numbered for a model). A file or
#: range over either is ``too_large``, naming a range that fits.
MAX_READ_FILE_BYTES = 128 * 1024
MAX_READ_CALL_BYTES = 512 * 1024
#: The largest file Tether reads through to count its lines and take its revision (a read
#: of a range of it, or an edit of it); a larger one is ``too_large`` whatever is asked.
MAX_SCAN_BYTES = 256 * 1024 * 1024
#: What one EditFiles carries: a whole file's new content, and everything of the call
#: (contents, search and replace text) together, in UTF-8 bytes. Under the frame's string
#: and frame limits.
MAX_WRITE_BYTES = 768 * 1024
MAX_EDIT_CALL_BYTES = 2 * 1024 * 1024
#: Search/replace blocks in one edit.
MAX_BLOCKS = 64
#: A reply's diff per file: at most this many lines (then it says how many it left out).
MAX_DIFF_LINES = 80
#: A thread's managed temporary directory (TETHER_TMP): bytes and files it may hold before
#: EditFiles {temporary} refuses to add more (what commands write there is measured too).
TEMPORARY_BUDGET_BYTES = 64 * 1024 * 1024
TEMPORARY_BUDGET_FILES = 256
#: Helpers named in one release.
MAX_RELEASE = 32
#: A helper's name: one plain file name in the managed directory.
HELPER_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$"
#: How long a files RPC may take (a 256 MiB file is read through, an edit fsyncs).
FILES_RPC_TIMEOUT_S = 30.0


def argv_bytes(argv: list[str]) -> int:
    """The size of an argv as ``MAX_ARGV_BYTES`` counts it: each argument's UTF-8 bytes plus
    one for the NUL that ends it, the way execve(2) counts arguments against its limits."""
    return sum(len(arg.encode()) + 1 for arg in argv)


#: What ends a line for a program that reads whole lines: LF, and CR (``ICRNL``, on by
#: default, turns it into LF; submit's Enter is a CR).
_LINE_END = re.compile("[\r\n]")


def long_line(text: str) -> tuple[int, int] | None:
    """``(line number, UTF-8 bytes)`` of the first line of ``text`` longer than
    ``MAX_CANONICAL_LINE_BYTES``, or None. Every line counts, the last one too (its Enter
    may come with this text or later)."""
    if len(text) * 4 <= MAX_CANONICAL_LINE_BYTES:
        return None  # too short to hold such a line (4 bytes a character at most)
    for number, line in enumerate(_LINE_END.split(text), start=1):
        size = len(line.encode())
        if size > MAX_CANONICAL_LINE_BYTES:
            return number, size
    return None
