"""Memory.for_tenant: one store and one set of services, every scope in its own tenant (I10)."""

from __future__ import annotations

from mindpalace import Memory


def test_a_tenant_handle_shares_services_and_store(memory: Memory) -> None:
    other = memory.for_tenant("acme")
    assert other.store is memory.store and other.tenant == "acme"
    for name in ("tokens", "summarizer", "embedder", "retriever", "history"):
        assert getattr(other, name) is getattr(memory, name)


def test_writes_stay_in_the_tenant(memory: Memory) -> None:
    acme = memory.for_tenant("acme")
    acme.session("s", user="u").remember("user:city", "Osaka", importance=0.9)
    assert acme.session("s", user="u").facts.peek("user:city") is not None
    assert memory.session("s", user="u").facts.peek("user:city") is None
    assert memory.for_tenant("globex").session("s", user="u").recall("Osaka") == []


def test_closing_a_tenant_handle_leaves_the_store_open(memory: Memory) -> None:
    memory.for_tenant("acme").close()
    memory.session("s").add_message({"role": "user", "content": "still open"})
    assert memory.session("s").messages.count() == 1
