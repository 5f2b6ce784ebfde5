"""ReadFiles and EditFiles input models (the MCP input schemas are generated from these);
their strings are the wire's own types (``protocol/file_methods``), so the limits are the same."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from tether.frontend.tools.schemas import Id, ToolArgs, WorkspaceRoot
from tether.protocol.file_methods import FilePath, PathSpecText, Token, WriteText
from tether.protocol.limits import (
    MAX_BLOCKS,
    MAX_EDITS,
    MAX_READ_CALL_BYTES,
    MAX_READ_FILE_BYTES,
    MAX_READ_PATHS,
    MAX_RELEASE,
    MAX_WRITE_BYTES,
)

PathSpecs = Annotated[list[PathSpecText], Field(
    min_length=1, max_length=MAX_READ_PATHS,
    description="files to read, relative to workspace_root (or absolute inside it), each "
                "with an optional line range: \"a.py\" (whole), \"a.py:10-20\", \"a.py:-20\" "
                "(lines 1-20), \"a.py:20-\" or \"a.py:20\" (line 20 to the end). At most "
                f"{MAX_READ_FILE_BYTES // 1024} KiB of one file and "
                f"{MAX_READ_CALL_BYTES // 1024} KiB per call; over that the file's error "
                "names a range that fits")]


class ReadFilesArgs(ToolArgs):
    """Read files (or line ranges) with their revisions, for EditFiles."""

    thread_id: Id
    workspace_root: WorkspaceRoot
    paths: PathSpecs
    temporary: bool = Field(default=False, description="read helpers of this thread's "
                            "managed directory (TETHER_TMP) by name instead")


class SearchBlockArgs(ToolArgs):
    search: WriteText = Field(min_length=1, description="text that occurs exactly once in "
                              "the file (copy it from ReadFiles' content)")
    replace: WriteText


class EditArgs(ToolArgs):
    path: FilePath = Field(description="relative to workspace_root (or a helper name with "
                           "temporary=true)")
    revision: Token | None = Field(default=None, description="the file's revision from "
                                   "ReadFiles; needed unless the file is being created")
    content: WriteText | None = Field(default=None, description="the whole new content (at "
                                      f"most {MAX_WRITE_BYTES // 1024} KiB)")
    blocks: list[SearchBlockArgs] | None = Field(default=None, min_length=1,
                                                 max_length=MAX_BLOCKS,
                                                 description="search/replace, applied in order")


class ReleaseArgs(ToolArgs):
    name: FilePath = Field(description="a helper's name (or its path under TETHER_TMP)")
    revision: Token = Field(description="its revision from a fresh ReadFiles temporary=true")
    generation: Token = Field(description="data.temporary.generation of that ReadFiles")


class EditFilesArgs(ToolArgs):
    """Edit files against the revisions read, or release temporary helpers."""

    thread_id: Id
    workspace_root: WorkspaceRoot
    edits: list[EditArgs] | None = Field(default=None, min_length=1, max_length=MAX_EDITS)
    temporary: bool = Field(default=False, description="write helpers into this thread's "
                            "managed directory (TETHER_TMP): path is a plain file name")
    release_temporary: list[ReleaseArgs] | None = Field(
        default=None, min_length=1, max_length=MAX_RELEASE,
        description="delete these helpers of this thread's managed directory (each kept, with "
                    "the reason, while a running execution of the thread uses it)")

    @model_validator(mode="after")
    def _one_kind(self) -> EditFilesArgs:
        if (self.edits is None) == (self.release_temporary is None):
            raise ValueError("EditFiles takes either edits or release_temporary")
        return self
