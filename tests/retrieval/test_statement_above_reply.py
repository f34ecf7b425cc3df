"""A long assistant reply does not outrank the short statement it answers (issue 10, item 7).

The reply talks around the subject ("car insurance, car servicing, car parking …") and so
matches a paraphrased question better than the statement holding the fact ("I drive a red
Mazda."); ``facts.statement_above_reply`` ranks the statement at least as high as the reply.
"""

from __future__ import annotations

from mindpalace import Memory
from mindpalace.retrieval.hybrid import _REPLY_LENGTH_RATIO, HybridRetriever
from mindpalace.scope import ANY, Scope
from mindpalace.settings import FactSettings

REPLY = (
    "Good to know. When it comes to your car, a little planning goes a long way. Car insurance, car "
    "servicing and car parking are the three costs most car owners forget. Keep the car papers in one "
    "place, and book the car service a month ahead."
)


def _scope(memory: Memory, uid: str) -> Scope:
    return memory.scope(user=uid, agent="a").with_(session=ANY)


def _ingest(memory: Memory, uid: str, messages: list[dict[str, str]]) -> None:
    memory.session("s1", user=uid, agent="a").messages.add_many(messages)


def _refs(memory: Memory, uid: str, query: str, settings: FactSettings) -> list[str]:
    retriever = HybridRetriever(memory.store, None, settings)  # keyword only: no supersession
    return [h.ref for h in retriever.search(_scope(memory, uid), query, k=5, kinds=["message"])]


CHAT = [
    {"role": "user", "content": "Good morning!"},
    {"role": "assistant", "content": "Good morning! How can I help?"},
    {"role": "user", "content": "I drive a red Mazda."},
    {"role": "assistant", "content": REPLY},
]


class TestStatementAboveReply:
    def test_the_reply_outranks_the_statement_without_it(self, memory: Memory, uid: str) -> None:
        _ingest(memory, uid, CHAT)
        off = _refs(memory, uid, "Which car do I have?", FactSettings(statement_above_reply=False))
        assert off.index("4") < off.index("3")  # the failure the setting fixes

    def test_the_statement_ranks_above_the_reply_that_answers_it(self, memory: Memory, uid: str) -> None:
        _ingest(memory, uid, CHAT)
        on = _refs(memory, uid, "Which car do I have?", FactSettings())
        assert on[:2] == ["3", "4"]
        hit = HybridRetriever(memory.store, None, FactSettings()).search(
            _scope(memory, uid), "Which car do I have?", k=1, kinds=["message"])[0]
        assert hit.why.neighbor == "4"  # the explanation names the reply that lifted it

    def test_a_statement_out_of_the_lists_is_read_back(self, memory: Memory, uid: str) -> None:
        # no context credit: the statement is in neither list nor fetched as a neighbour
        _ingest(memory, uid, CHAT)
        settings = FactSettings(neighbor_weights=[], speaker_boost=0)
        assert "3" not in _refs(memory, uid, "Which car do I have?", settings.model_copy(
            update={"statement_above_reply": False}))
        assert _refs(memory, uid, "Which car do I have?", settings)[:2] == ["3", "4"]

    def test_a_reply_to_a_question_keeps_its_rank(self, memory: Memory, uid: str) -> None:
        # the reply answers a question: the answer is the reply's own, the question states nothing
        chat = [{"role": "user", "content": "Any tips?"}, {"role": "assistant", "content": REPLY}]
        _ingest(memory, uid, chat)
        assert _refs(memory, uid, "Which car do I have?", FactSettings())[0] == "2"

    def test_speakers_of_one_role_are_unchanged(self, memory: Memory, uid: str) -> None:
        # two people talking (LoCoMo: both role user, by name): no message is a reply
        chat = [dict(m, role="user", name=("Ann" if i % 2 else "Bo")) for i, m in enumerate(CHAT)]
        _ingest(memory, uid, chat)
        on = _refs(memory, uid, "Which car do I have?", FactSettings())
        off = _refs(memory, uid, "Which car do I have?", FactSettings(statement_above_reply=False))
        assert on[:2] == off[:2] == ["4", "3"]  # the reply matches best and keeps its place

    def test_a_skipped_statement_is_not_lifted(self, memory: Memory, uid: str) -> None:
        _ingest(memory, uid, CHAT)
        retriever = HybridRetriever(memory.store, None, FactSettings(neighbor_weights=[], speaker_boost=0))
        hits = retriever.search(_scope(memory, uid), "Which car do I have?", k=5, kinds=["message"],
                                skip=lambda d: d.ref == "3")
        assert "3" not in [h.ref for h in hits]

    def test_a_reply_of_the_statements_length_is_a_turn_of_its_own(self, memory: Memory, uid: str) -> None:
        # two people talking (one of them mapped to role assistant): a turn about as long as the
        # one before it holds its own facts and does not lift it; only a reply at least
        # _REPLY_LENGTH_RATIO times longer talks around the statement's subject
        short_reply = "Car insurance and car parking cost me a lot with my car."
        statement = "I drive a red Mazda, it is fun."
        assert len(short_reply) < _REPLY_LENGTH_RATIO * len(statement)
        chat = [dict(m) for m in CHAT]
        chat[2]["content"], chat[3]["content"] = statement, short_reply
        _ingest(memory, uid, chat)
        on = _refs(memory, uid, "Which car do I have?", FactSettings())
        off = _refs(memory, uid, "Which car do I have?", FactSettings(statement_above_reply=False))
        assert on[:2] == off[:2] == ["4", "3"]  # the reply matches best and keeps its place
