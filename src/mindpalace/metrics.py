"""Metrics: counters and histograms of one ``Memory`` handle, in Prometheus text format.

What users of memory systems ask for after correctness (issue 15, seed 004's checklist): how
big the prompts are against their budget, how often the conversation is compacted, how often
the summary gate refuses a summary, what consolidation and dream runs spend against their
caps, how long recall takes, how often the tool ledger replays a call or meets an unknown
outcome, how often a protected constraint refuses a write.

Each :class:`MemoryMetrics` owns its own ``prometheus_client.CollectorRegistry`` (never the
process-global one), so two handles — tests, tenants — never share or collide on a series.
:meth:`MemoryMetrics.exposition` renders the registry in the Prometheus text format (served
at ``/metrics`` by the REST server); :meth:`MemoryMetrics.summary` is the short table of
``mindpalace status``. Observations are in-process: they count what this process did since
the handle was opened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from mindpalace.errors import ConstraintError, OutcomeUnknownError
from mindpalace.tasks.ledger import ToolCall

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
"""The HTTP content type of :meth:`MemoryMetrics.exposition` (text format 0.0.4)."""

_TOKEN_BUCKETS: Final = (256, 512, 1_024, 2_048, 4_096, 8_192, 16_384, 32_768, 65_536, 131_072)
_RATIO_BUCKETS: Final = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0)
_SECONDS_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass(frozen=True, slots=True)
class MetricCaps:
    """The caps spend is measured against (tokens): ``summary_max_tokens`` (the archived
    summary block of consolidation) and ``dream_token_budget`` (one dream run)."""

    summary_max_tokens: int
    dream_token_budget: int


class MemoryMetrics:
    """The metrics of one Memory handle.

    Args:
        caps: the configured caps, exported as gauges beside the spend.
        namespace: metric name prefix (``mindpalace``).
    """

    def __init__(self, caps: MetricCaps, *, namespace: str = "mindpalace") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, ns = self.registry, namespace
        self.prompt_tokens = Histogram("prompt_tokens", "Tokens of each prepared prompt.",
                                       namespace=ns, registry=r, buckets=_TOKEN_BUCKETS)
        self.prompt_budget_ratio = Histogram(
            "prompt_budget_ratio", "Prepared prompt tokens / its token budget (never above 1).",
            namespace=ns, registry=r, buckets=_RATIO_BUCKETS)
        self.prompts_degraded = Counter(
            "prompt_degradations", "Prepared prompts that had to drop or cut something to fit.",
            namespace=ns, registry=r)
        self.compactions = Counter(
            "compactions", "Compactions by kind: consolidation (prepare), idle (compact_idle).",
            ["kind"], namespace=ns, registry=r)
        self.gate_rejections = Counter(
            "summary_gate_rejections", "Summaries the gate refused (archived as raw breadcrumbs).",
            namespace=ns, registry=r)
        self.consolidation_tokens = Histogram(
            "consolidation_tokens", "Summarizer tokens spent by one consolidation (prompt + reply).",
            namespace=ns, registry=r, buckets=_TOKEN_BUCKETS)
        self.consolidation_cap = Gauge(
            "consolidation_summary_cap_tokens", "session.summary_max_tokens: cap of the archived summary.",
            namespace=ns, registry=r)
        self.dream_tokens = Histogram("dream_tokens", "LLM tokens spent by one dream run.",
                                      namespace=ns, registry=r, buckets=_TOKEN_BUCKETS)
        self.dream_budget = Gauge("dream_token_budget_tokens", "knowledge.dream_token_budget.",
                                  namespace=ns, registry=r)
        self.dream_budget_stops = Counter(
            "dream_budget_stops", "Dream runs the token budget ended early.", namespace=ns, registry=r)
        self.recall_seconds = Histogram(
            "recall_seconds", "Latency of Session.recall (seconds).", namespace=ns, registry=r,
            buckets=_SECONDS_BUCKETS)
        self.ledger_replays = Counter(
            "ledger_replays", "Tool calls answered from the ledger (already completed).",
            namespace=ns, registry=r)
        self.ledger_unknown = Counter(
            "ledger_unknown_outcomes", "Tool calls refused because an earlier run's outcome is unknown.",
            namespace=ns, registry=r)
        self.constraint_refusals = Counter(
            "constraint_refusals", "Tool calls or writes a protected constraint refused.",
            namespace=ns, registry=r)
        self.consolidation_cap.set(caps.summary_max_tokens)
        self.dream_budget.set(caps.dream_token_budget)

    # -- observations (called by the facade) -------------------------------------------------
    def observe_prompt(self, report: Any) -> None:
        """One prepared prompt (a :class:`~mindpalace.context.ContextReport`): its tokens,
        its ratio to the budget, degradations and the consolidation that made room."""
        self.prompt_tokens.observe(report.total_tokens)
        if report.budget_tokens > 0:
            self.prompt_budget_ratio.observe(report.total_tokens / report.budget_tokens)
        if report.degradations:
            self.prompts_degraded.inc()
        self.observe_consolidation(report.consolidation, kind="consolidation")

    def observe_consolidation(self, result: Any, *, kind: str) -> None:
        """One consolidation result (None or nothing archived = not a compaction)."""
        if result is None or not result.entries:
            return
        self.compactions.labels(kind).inc()
        self.consolidation_tokens.observe(result.summary_tokens_spent)
        if result.raw_fallbacks:
            self.gate_rejections.inc(result.raw_fallbacks)

    def observe_dream(self, report: Any) -> None:
        """One dream run (a :class:`~mindpalace.knowledge.dream.DreamReport`)."""
        self.dream_tokens.observe(report.tokens_spent)
        if report.budget_stopped:
            self.dream_budget_stops.inc()

    # -- reading -----------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (content type :data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)

    def summary(self) -> dict[str, float]:
        """Totals for ``mindpalace status``: ``{"prompts": n, "prompt_tokens_mean": …,
        "recalls": n, "recall_seconds_mean": …, "compactions": n, …}``."""
        values: dict[str, float] = {}
        for family in self.registry.collect():
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                name = s.name.removeprefix("mindpalace_")
                if s.name.endswith("_bucket"):
                    continue
                values[name] = values.get(name, 0.0) + s.value
        out = {
            "prompts": values.get("prompt_tokens_count", 0.0),
            "prompt_tokens_mean": _mean(values, "prompt_tokens"),
            "prompt_budget_ratio_mean": _mean(values, "prompt_budget_ratio"),
            "prompts_degraded": values.get("prompt_degradations_total", 0.0),
            "compactions": values.get("compactions_total", 0.0),
            "summary_gate_rejections": values.get("summary_gate_rejections_total", 0.0),
            "consolidation_tokens": values.get("consolidation_tokens_sum", 0.0),
            "consolidation_summary_cap_tokens": values.get("consolidation_summary_cap_tokens", 0.0),
            "dream_tokens": values.get("dream_tokens_sum", 0.0),
            "dream_token_budget_tokens": values.get("dream_token_budget_tokens", 0.0),
            "recalls": values.get("recall_seconds_count", 0.0),
            "recall_seconds_mean": _mean(values, "recall_seconds"),
            "ledger_replays": values.get("ledger_replays_total", 0.0),
            "ledger_unknown_outcomes": values.get("ledger_unknown_outcomes_total", 0.0),
            "constraint_refusals": values.get("constraint_refusals_total", 0.0),
        }
        return out


def _mean(values: dict[str, float], name: str) -> float:
    count = values.get(f"{name}_count", 0.0)
    return values.get(f"{name}_sum", 0.0) / count if count else 0.0


@dataclass
class MeteredToolCall(ToolCall):
    """A :class:`~mindpalace.tasks.ledger.ToolCall` that counts ledger replays (the call had
    completed before: its recorded result is returned), unknown outcomes (refused because an
    earlier attempt's outcome is unknown, or recorded unknown now) and constraint refusals
    (a guard blocked it). Behaviour is the ToolCall's, unchanged; errors are re-raised."""

    metrics: MemoryMetrics | None = None

    def __enter__(self) -> MeteredToolCall:
        try:
            super().__enter__()
        except OutcomeUnknownError:
            self._inc("ledger_unknown")
            raise
        if self.done:
            self._inc("ledger_replays")
        return self

    def run(self, fn: Callable[..., Any], *, checkpoint: Mapping[str, Any] | None = None) -> Any:
        try:
            return super().run(fn, checkpoint=checkpoint)
        except ConstraintError:
            self._inc("constraint_refusals")
            raise
        except Exception:
            if self.entry is not None and self.entry.status == "unknown":
                self._inc("ledger_unknown")
            raise

    def _inc(self, name: str) -> None:
        if self.metrics is not None:
            counter: Counter = getattr(self.metrics, name)
            counter.inc()


def metered(call: ToolCall, metrics: MemoryMetrics) -> MeteredToolCall:
    """`call` as a :class:`MeteredToolCall` counting into `metrics` (same fields)."""
    names = _INIT_FIELDS.get(type(call))
    if names is None:  # the constructor's fields, looked up once per class
        names = _INIT_FIELDS[type(call)] = tuple(f.name for f in fields(call) if f.init)
    return MeteredToolCall(**{n: getattr(call, n) for n in names}, metrics=metrics)


_INIT_FIELDS: dict[type, tuple[str, ...]] = {}
