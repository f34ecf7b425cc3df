"""The layers of DESIGN.md §2 hold: no import cycle anywhere, no import upwards, no component
reaching the facade — type-checking imports included (the import graph is built with grimp)."""

from __future__ import annotations

import graphlib

import grimp
import pytest

PACKAGE = "mindpalace"

# DESIGN.md §2, top first. Siblings inside one Layer may import each other (independent=False)
# as long as no cycle forms; a lower layer never imports a higher one.
LAYERS = (
    grimp.Layer("__main__", "cli", "demo", "eval", "replay", "testing", "rest", "client", "mcpserver",
                independent=False),  # interfaces
    grimp.Layer("agent", "aio", "worker", independent=False),  # the agent loop, the async twin, the worker:
    # clients of the facade, driven by the interfaces
    grimp.Layer("memory", "workspace", independent=False),  # the facade: the only wiring
    grimp.Layer("context", "recalled", independent=False),  # assembly: the only place a prompt is built
    grimp.Layer("steps", "session", "history", "facts", "tasks", "refs", "auth", "knowledge",
                "archive", "lineage", "metrics", independent=False),  # components (refs: the
    # read_files resolver over them; auth: API keys per tenant; lineage: the memory event log;
    # metrics: counters of one Memory handle)
    grimp.Layer("retrieval", "summary", "providers", "tokens", independent=False),  # services
    grimp.Layer("store"),  # persistence
    grimp.Layer("settings", "blocks", "checks", "scope", "textsafe", "timeutil", "datenotes", "fsutil", "errors",
                independent=False),  # foundation
)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, exclude_type_checking_imports=False, cache_dir=None)


def ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def runtime_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """module → what importing it runs: each imported module, plus the packages above it that
    the importer is not already inside (``import a.b.c`` runs ``a/b/__init__`` first)."""
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        mine = set(ancestors(module))
        targets: set[str] = set()
        for imported in graph.find_modules_directly_imported_by(module):
            targets.add(imported)
            targets |= {a for a in ancestors(imported) if a not in mine and a != module}
        edges[module] = targets - {module}
    return edges


def test_every_module_is_in_a_layer(graph: grimp.ImportGraph) -> None:
    tails = {tail for layer in LAYERS for tail in layer.module_tails}
    unplaced = sorted(m for m in graph.modules
                      if m != PACKAGE and m.split(".")[1] not in tails)
    assert unplaced == [], "place new modules in a layer of DESIGN.md §2"


def test_no_layer_imports_a_higher_one(graph: grimp.ImportGraph) -> None:
    illegal = graph.find_illegal_dependencies_for_layers(layers=LAYERS, containers={PACKAGE})
    found = sorted(
        f"{d.importer} -> {d.imported} via " + " -> ".join(
            (*sorted(route.heads), *route.middle, *sorted(route.tails)))
        for d in illegal for route in d.routes
    )
    assert found == []


def test_nothing_below_the_facade_imports_it(graph: grimp.ImportGraph) -> None:
    importers = graph.find_downstream_modules("mindpalace.memory")  # direct or indirect
    allowed = ("mindpalace.__main__", "mindpalace.cli", "mindpalace.demo", "mindpalace.eval", "mindpalace.replay",
               "mindpalace.testing", "mindpalace.rest", "mindpalace.aio",
               "mindpalace.mcpserver", "mindpalace.agent", "mindpalace.worker")
    below = sorted(m for m in importers if m != PACKAGE and not m.startswith(allowed))
    assert below == []


def test_there_is_no_import_cycle(graph: grimp.ImportGraph) -> None:
    sorter = graphlib.TopologicalSorter(runtime_edges(graph))
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def test_the_cycle_check_sees_a_cycle() -> None:
    edges = {"p.a": {"p.b"}, "p.b": {"p.a"}}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(edges).prepare()


def test_components_reach_the_store_only_through_its_protocol(graph: grimp.ImportGraph) -> None:
    """No component, service or assembly module imports a backend: they get a
    ``mindpalace.store.base.Store`` and never branch on SQLite or PostgreSQL. Backends are
    chosen by ``mindpalace.store.open_store``; only the workspace (its SQLite doctor) and the
    test helpers name one."""
    allowed = ("mindpalace.store", "mindpalace.workspace", "mindpalace.testing")
    found = sorted(
        f"{importer} -> {backend}"
        for backend in ("mindpalace.store.sqlite", "mindpalace.store.postgres")
        for importer in graph.find_modules_that_directly_import(backend)
        | {m for sub in graph.find_descendants(backend)
           for m in graph.find_modules_that_directly_import(sub)}
        if not importer.startswith(allowed)
    )
    assert found == []
