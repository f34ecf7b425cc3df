"""The synthetic knowledge-update set: deterministic, well-formed, and the product path ranks
corrections above the statements they correct at least as often as either single list."""

from __future__ import annotations

import pytest

from mindpalace.eval.knowledge_update import generate, run_knowledge_update
from mindpalace.retrieval.supersession import subject_terms


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



def test_the_varied_generator_is_deterministic_and_harder_in_the_ways_it_claims() -> None:
    a, b = generate(5, 8, generator="varied"), generate(5, 8, generator="varied")
    assert [[m.text for m in c.messages] for c in a] == [[m.text for m in c.messages] for c in b]
    assert [[m.text for m in c.messages] for c in a] != [[m.text for m in c.messages] for c in generate(5, 8)]
    chains = embedded = disjoint = total = 0
    for conv in a:
        assert len(conv.cases) == len(conv.stale) == 4
        for (_subject, question, o, c, _same), older in zip(conv.cases, conv.stale, strict=True):
            assert older[0] == o and question.endswith("?")
            msgs = [conv.messages[p] for p in (*older, c)]
            assert all(m.role == "user" for m in msgs)
            assert all((msgs[i].when, p) < (msgs[i + 1].when, q)
                       for i, (p, q) in enumerate(zip((*older, c)[:-1], (*older, c)[1:], strict=True)))
            total += 1
            chains += len(older) > 1
            embedded += len(conv.messages[c].text.split()) > 25
            disjoint += not (subject_terms(question) & subject_terms(conv.messages[c].text))
    # chains of two updates, updates inside long messages, questions sharing no content word
    assert chains > 0 and embedded > 0 and disjoint >= total // 2


def test_an_unknown_generator_is_refused() -> None:
    with pytest.raises(ValueError, match="generator"):
        generate(1, 1, generator="nope")
