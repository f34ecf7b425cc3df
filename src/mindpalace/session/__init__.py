"""Session component: durable chat messages, pairing validation, consolidation (seed 002)."""

from mindpalace.session.messages import MessageLog, StoredMessage, message_text, validate_message
from mindpalace.session.pairing import PairingReport, check_pairing, repair_pairing, tool_groups

__all__ = [
    "MessageLog",
    "PairingReport",
    "StoredMessage",
    "check_pairing",
    "message_text",
    "repair_pairing",
    "tool_groups",
    "validate_message",
]
