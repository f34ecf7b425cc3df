"""The synthetic knowledge-update set: deterministic, well-formed, and the product path ranks
corrections above the statements they correct at least as often as either single list."""

from __future__ import annotations

from mindpalace.eval.knowledge_update import generate, run_knowledge_update


def test_generation_is_deterministic_and_well_formed() -> None:
    a, b = generate(3, 4), generate(3, 4)
    assert [[m.text for m in c.messages] for c in a] == [[m.text for m in c.messages] for c in b]
    for conv in a:
        assert len(conv.cases) == 4
        for _subject, question, o, c, _same in conv.cases:
            orig, corr = conv.messages[o], conv.messages[c]
            assert orig.role == corr.role == "user" and question.endswith("?")
            assert (orig.when, o) < (corr.when, c)  # the correction comes later
        replies = [m for m in conv.messages if m.role == "assistant"]
        users = [m for m in conv.messages if m.role == "user"]
        assert min(len(r.text.split()) for r in replies) > 4 * max(len(u.text.split()) for u in users) / 2


def test_product_is_at_least_each_single_list() -> None:
    report = run_knowledge_update(conversations=6, embedder="hashing")
    product, dense, bm25 = report.methods
    assert product.cases == 24
    assert product.rate >= max(dense.rate, bm25.rate)
    assert product.recall_rate(10) >= max(dense.recall_rate(10), bm25.recall_rate(10))
    off = run_knowledge_update(conversations=6, embedder="hashing",
                               fact_overrides={"supersede_similarity": 1.0}).methods[0]
    assert product.rate > off.rate  # supersession is what moves corrections up

