"""``ReadFiles`` and ``EditFiles`` (docs/tools.md#readfiles, docs/tools.md#editfiles): the
file work is the guardian's (``files.read``, ``files.edit``, ``files.release``, capability
``files``); this side numbers the lines a model reads and says what happened in short.
A guardian older than protocol 1.9 is ``capability_missing`` before anything is sent."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from tether.frontend.tools import replies
from tether.frontend.tools.base import Progress, Session, Tool
from tether.frontend.tools.file_args import EditFilesArgs, ReadFilesArgs
from tether.frontend.tools.outputs import EDIT_FILES_OUTPUT, READ_FILES_OUTPUT
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import FILES_RPC_TIMEOUT_S
from tether.protocol.method_table import FILES_EDIT, FILES_READ, FILES_RELEASE


class ReadFilesTool(Tool):
    name = "ReadFiles"
    description = (
        "Read files of the workspace, whole or by line range (\"a.py\", \"a.py:10-20\", "
        "\"a.py:-20\" = lines 1-20, \"a.py:20-\" or \"a.py:20\" = from line 20). The text shows "
        "numbered lines; structured content has each file's raw content, start_line, "
        "end_line, total_lines and revision (pass it to EditFiles). Each file has its own "
        "error (not_found, denied, binary, too_large) without failing the others; a file over "
        "the budget names a range that fits. temporary=true reads this thread's helpers "
        "(TETHER_TMP) by name."
    )
    args_model = ReadFilesArgs
    output_schema = READ_FILES_OUTPUT
    annotations = types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, open_world_hint=False)

    async def run(self, session: Session, args: ReadFilesArgs,
                  progress: Progress) -> types.CallToolResult:
        root, scope = session.scope(args.thread_id, args.workspace_root)
        reply = await session.locator.call(
            root, FILES_READ, {**scope, "paths": list(args.paths), "temporary": args.temporary},
            timeout_s=FILES_RPC_TIMEOUT_S)
        data = replies.as_data(reply)
        text = "\n".join(_shown(entry) for entry in data["files"])
        failed = [entry for entry in data["files"] if not entry.get("ok")]
        if failed:
            return replies.issues(
                data, ErrorCode.FILE_READ_ISSUES.value,
                f"{len(failed)} of {len(data['files'])} files were not read; see each "
                "file's error", text=text)
        return replies.ok(data, text)


def _shown(entry: dict[str, Any]) -> str:
    """One file for a model: a header, then its lines numbered as ``cat -n`` does."""
    if not entry.get("ok"):
        error = entry.get("error") or {}
        return f"== {entry.get('spec')}: {error.get('code')}: {error.get('message')}"
    start, content = entry.get("start_line") or 1, entry.get("content") or ""
    header = (f"== {entry.get('path')}: lines {start}-{entry.get('end_line')} of "
              f"{entry.get('total_lines')} (revision {entry.get('revision')})")
    if entry.get("invalid_utf8"):
        header += " (bytes that are not UTF-8 shown as U+FFFD)"
    lines = content.splitlines()
    return "\n".join([header, *(f"{start + i:6}\t{line}" for i, line in enumerate(lines))])


class EditFilesTool(Tool):
    name = "EditFiles"
    description = (
        "Edit workspace files against the revision ReadFiles gave: each edit is "
        "{path, revision, content} (the whole file) or {path, revision, blocks: [{search, "
        "replace}]} (each search text must occur exactly once). Creating a file needs no "
        "revision; changing one does. A file changed since its revision is stale_revision; "
        "if any edit cannot apply, nothing is written. Writes are atomic. The reply has each "
        "file's new revision and a short diff. temporary=true writes helpers into this "
        "thread's managed directory (TETHER_TMP); release_temporary: [{name, revision, "
        "generation}] deletes helpers no running execution of the thread uses."
    )
    args_model = EditFilesArgs
    output_schema = EDIT_FILES_OUTPUT
    annotations = types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=False,
        open_world_hint=False)

    async def run(self, session: Session, args: EditFilesArgs,
                  progress: Progress) -> types.CallToolResult:
        root, scope = session.scope(args.thread_id, args.workspace_root)
        if args.release_temporary is not None:
            return await _release(session, root, scope, args)
        edits = [edit.model_dump(exclude_none=True) for edit in args.edits or ()]
        reply = await session.locator.call(
            root, FILES_EDIT, {**scope, "edits": edits, "temporary": args.temporary},
            timeout_s=FILES_RPC_TIMEOUT_S)
        data = replies.as_data(reply)
        if not data["applied"]:
            errors = [entry["error"] for entry in data["files"] if entry.get("error")]
            first = errors[0] if errors else {"code": ErrorCode.INTERNAL.value, "message": ""}
            more = (f" (and {len(errors) - 1} more refused edits: see data.files)"
                    if len(errors) > 1 else "")
            raise TetherError.from_wire({
                "code": first["code"],
                "message": (first["message"] if "nothing was written" in first["message"]
                            else f"nothing was written: {first['message']}") + more,
                "data": {**data, "input_sent": False}})
        parts = []
        for entry in data["files"]:
            parts.append(f"== {entry['path']}: {entry['action']}, revision {entry['revision']}")
            if entry.get("diff"):
                parts.append(entry["diff"])
            if entry.get("diff_lines_omitted"):
                parts.append(f"(… {entry['diff_lines_omitted']} more diff lines)")
        return replies.ok(data, "\n".join(parts))


async def _release(session: Session, root: str, scope: dict[str, Any],
                   args: EditFilesArgs) -> types.CallToolResult:
    helpers = [item.model_dump() for item in args.release_temporary or ()]
    reply = await session.locator.call(root, FILES_RELEASE, {**scope, "helpers": helpers},
                                       timeout_s=FILES_RPC_TIMEOUT_S)
    data = replies.as_data(reply)
    lines = []
    for helper in data["helpers"]:
        line = f"{helper['name']}: {helper['status']}"
        if helper.get("reason"):
            line += f" ({helper['reason']}: pids {', '.join(map(str, helper.get('pids') or []))})"
        if helper.get("error"):
            line += f" ({helper['error']['code']}: {helper['error']['message']})"
        lines.append(line)
    text = "\n".join(lines)
    if any(h["status"] not in ("released", "absent") for h in data["helpers"]):
        return replies.issues(data, ErrorCode.TEMPORARY_RELEASE_ISSUES.value,
                              "some helpers were kept or refused; see each helper", text=text)
    return replies.ok(data, text)
