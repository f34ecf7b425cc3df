"""MCP resources: the seam for the knowledge files (issue 12).

When the knowledge layer lands (SOUL / USER / MEMORY markdown and the L0–L3 files under the
workspace's ``knowledge/`` folder, git-tracked), each readable file becomes one resource
``mindpalace://knowledge/<tenant>/<path>`` here, read through the facade in the caller's
tenant (I10) — never by opening paths the client names. Until then the server lists no
resources: :func:`knowledge_resources` returns none, and this is the one place to add them.
"""

from __future__ import annotations

from mcp.server.mcpserver.resources import Resource

from mindpalace.aio import AsyncMemory

__all__ = ["knowledge_resources"]


def knowledge_resources(memory: AsyncMemory) -> list[Resource]:
    """The resources the server lists for `memory`'s workspace: none yet (issue 12 seam)."""
    del memory  # the knowledge facade is not built yet; nothing is exposed
    return []
