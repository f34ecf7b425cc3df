"""L4 archive: finished or idle sessions compressed, de-duplicated, archived monthly, recallable
(seed 003, GenericAgent L4 — plus the retrieval GenericAgent lacks)."""

from mindpalace.archive.exchanges import Exchange, Turn
from mindpalace.archive.sessions import DOC_KIND, ArchiveOutcome, SessionArchive

__all__ = ["DOC_KIND", "ArchiveOutcome", "Exchange", "SessionArchive", "Turn"]
