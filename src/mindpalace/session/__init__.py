"""Session component: durable chat messages, pairing validation, consolidation (seed 002)."""

from mindpalace.session.autocompact import AutoCompact, CompactOutcome
from mindpalace.session.consolidator import ConsolidationResult, ConsolidationState, Consolidator
from mindpalace.session.lease import Lease, SessionBusyError
from mindpalace.session.messages import MessageLog, StoredMessage, message_text, validate_message
from mindpalace.session.pairing import PairingReport, check_pairing, repair_pairing, tool_groups

__all__ = [
    "AutoCompact",
    "CompactOutcome",
    "ConsolidationResult",
    "ConsolidationState",
    "Consolidator",
    "Lease",
    "MessageLog",
    "PairingReport",
    "SessionBusyError",
    "StoredMessage",
    "check_pairing",
    "message_text",
    "repair_pairing",
    "tool_groups",
    "validate_message",
]
