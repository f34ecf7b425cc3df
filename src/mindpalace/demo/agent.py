"""The demo's scripted travel agent (no LLM): one policy, two memories.

* :class:`EngineMind` uses mindpalace: task events + checkpoints after every step, the ledger
  for every side effect (with a reconcile hook asking the booking system by client reference),
  protected constraints + a guard on ``book_hotel``, recall of earlier search results, and a
  prompt built under a token budget with the constraints and user corrections on top.
* :class:`WindowMind` is seed 004's failing agent: a plain 20-message sliding window, a state
  dict that tool results are merged into, no ledger, nothing durable.

The policy is the same for both. Like a real model it is sometimes tempted by the search's
"recommended" (over-budget) hotel; what stops it — or not — is the memory.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mindpalace.demo.scenario import (
    BUDGET_PER_NIGHT_CNY,
    CORRECTED_BUDGET_CNY,
    TOTAL_BUDGET_CNY,
    StepSpec,
    correction_text,
    noise_text,
)
from mindpalace.demo.world import World
from mindpalace.errors import ConstraintError
from mindpalace.tasks import NOT_RUN, LedgerEntry
from mindpalace.tokens import TokenCounter

READ_ONLY_TOOLS = ("search_attraction", "search_hotel", "lookup")
TEMPTATION = 0.5
"""Chance the scripted 'model' first proposes the recommended hotel without checking the budget."""
SYSTEM_PROMPT = "You are a travel-planning agent. Plan a 5-day Tokyo trip and book it exactly once."


@dataclass
class StepOutcome:
    """What a step did: a one-line result, artifacts to checkpoint, counters."""

    text: str
    artifacts: dict[str, Any] = field(default_factory=dict)
    blocked: int = 0
    data: Any = None
    """The raw tool reply, kept for recall (not checkpointed)."""


@dataclass(frozen=True, slots=True)
class EngineStepResult:
    """Progress report of one finished step (for the live view)."""

    index: int
    name: str
    text: str
    prompt_tokens: int
    version: int


class Mind(Protocol):
    """What the policy needs from memory."""

    def booking(self, key: str) -> dict[str, Any] | None: ...
    def budget(self) -> int | None: ...
    def hotel_options(self, night: str) -> list[dict[str, Any]] | None: ...
    def tool(self, name: str, args: dict[str, Any], fn: Callable[..., Any], *, key: str | None = None) -> Any: ...
    def user_says(self, text: str, updates: dict[str, Any]) -> None: ...
    def note(self, index: int, spec: StepSpec, text: str, data: Any) -> None: ...


class Policy:
    """The scripted agent: executes one planned step against the world through a Mind."""

    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.seed = seed

    def execute(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        handler = getattr(self, f"_do_{spec.kind}")
        outcome: StepOutcome = handler(mind, index, spec)
        mind.note(index, spec, outcome.text, outcome.data if outcome.data is not None else outcome.artifacts)
        return outcome

    def _do_search_attraction(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        r = mind.tool("search_attraction", {"name": spec.item}, self.world.search_attraction)
        return StepOutcome(f"{r['name']}: ticket {r['ticket']} CNY, open {r['hours']}, area {r['area']}")

    def _do_book_ticket(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        key = f"ticket:{spec.item}:{spec.date}"
        if (b := mind.booking(key)) is not None:
            return StepOutcome(f"{spec.item} on {spec.date} already booked ({b['booking_id']})")
        ref = f"{spec.item}@{spec.date}"  # the ledger key is book_ticket:<ref> = the client reference
        args = {"place": spec.item, "date": spec.date, "quantity": 1, "client_ref": f"book_ticket:{ref}"}
        r = mind.tool("book_ticket", args, self.world.book_ticket, key=ref)
        return StepOutcome(f"booked {spec.item} on {spec.date}: {r['booking_id']} ({r['total']} CNY)", {key: r})

    def _do_search_hotel(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        r = mind.tool("search_hotel", {"city": spec.item, "night": spec.date}, self.world.search_hotel)
        offers = ", ".join(f"{h['hotel']} {h['price_per_night']}" for h in r["hotels"])
        return StepOutcome(f"search_hotel {spec.date}: {offers}", {}, data=r)

    def _do_book_hotel(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        night = spec.date
        key = f"hotel:{night}"
        if (b := mind.booking(key)) is not None:
            return StepOutcome(f"hotel for {night} already booked ({b['booking_id']})")
        options = mind.hotel_options(night)
        if options is None:  # forgotten: search again (read-only, harmless)
            options = mind.tool("search_hotel", {"city": spec.item, "night": night}, self.world.search_hotel)["hotels"]
        budget = mind.budget()
        tempted = random.Random(f"{self.seed}:{index}").random() < TEMPTATION
        ranked = sorted(options, key=lambda h: (not h.get("recommended"), -h["price_per_night"]))
        if not tempted and budget is not None:
            ranked = [h for h in ranked if h["price_per_night"] <= budget]
        blocked = 0
        for hotel in ranked:
            args = {"hotel": hotel["hotel"], "night": night, "price_per_night": hotel["price_per_night"],
                    "client_ref": f"book_hotel:{night}"}
            try:  # keyed by night: one hotel per night, whichever option is finally taken
                r = mind.tool("book_hotel", args, self.world.book_hotel, key=night)
            except ConstraintError:
                blocked += 1  # the guard said no: try the next option
                continue
            return StepOutcome(f"booked {r['hotel']} for {night}: {r['booking_id']} ({r['total']} CNY)", {key: r}, blocked)
        return StepOutcome(f"no hotel within budget for {night}", {}, blocked)

    def _do_pay(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        night = spec.date
        key = f"pay:{night}"
        if (p := mind.booking(key)) is not None:
            return StepOutcome(f"hotel {night} already paid ({p['payment_id']})")
        booking = mind.booking(f"hotel:{night}")
        if booking is None:
            return StepOutcome(f"nothing to pay for {night} yet")
        args = {"booking_id": booking["booking_id"], "amount": booking["total"], "client_ref": f"pay:{night}"}
        r = mind.tool("pay", args, self.world.pay, key=night)
        return StepOutcome(f"paid {r['amount']} CNY for {booking['booking_id']}: {r['payment_id']}", {key: r})

    def _do_feedback(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        mind.user_says(correction_text(), {"budget_per_night_cny": CORRECTED_BUDGET_CNY})
        return StepOutcome(f"user: {correction_text()}")

    def _do_noise(self, mind: Mind, index: int, spec: StepSpec) -> StepOutcome:
        text = mind.tool("lookup", {"topic": spec.item, "date": spec.date, "index": index},
                         lambda topic, date, index: {"text": noise_text(topic, date, index)})["text"]
        return StepOutcome(text)


# -- the seed's failing memory ---------------------------------------------------------------
class WindowMind:
    """A 20-message sliding window + a state dict that tool results are merged into (seed 004)."""

    def __init__(self, counter: TokenCounter, window_messages: int = 20) -> None:
        self.counter = counter
        self.window: list[dict[str, Any]] = []
        self.max = window_messages
        self.state: dict[str, Any] = {"budget_per_night_cny": BUDGET_PER_NIGHT_CNY, "total_budget_cny": TOTAL_BUDGET_CNY}
        self.peak_tokens = 0

    def _push(self, role: str, content: str, data: Any = None) -> None:
        self.window.append({"role": role, "content": content, "data": data})
        del self.window[: -self.max]

    def booking(self, key: str) -> dict[str, Any] | None:
        for m in reversed(self.window):
            if isinstance(m["data"], dict) and key in m["data"]:
                return m["data"][key]
        return None

    def budget(self) -> int | None:
        return self.state.get("budget_per_night_cny")

    def hotel_options(self, night: str) -> list[dict[str, Any]] | None:
        for m in reversed(self.window):
            d = m["data"]
            if isinstance(d, dict) and d.get("night") == night and "hotels" in d:
                return d["hotels"]
        return None

    def tool(self, name: str, args: dict[str, Any], fn: Callable[..., Any], *, key: str | None = None) -> Any:
        result = fn(**args)
        if isinstance(result, dict):  # the bug: tool output written into state unprotected
            self.state.update({k: v for k, v in result.items() if k in self.state})
        self._push("tool", f"{name} -> {json.dumps(result, ensure_ascii=False)[:400]}", result)
        return result

    def user_says(self, text: str, updates: dict[str, Any]) -> None:
        self.state.update(updates)
        self._push("user", text)

    def note(self, index: int, spec: StepSpec, text: str, data: Any) -> None:
        self._push("assistant", f"step {index}: {text}", data or None)
        prompt = [{"role": "system", "content": SYSTEM_PROMPT + " state=" + json.dumps(self.state)}]
        prompt += [{"role": m["role"] if m["role"] != "tool" else "user", "content": m["content"]} for m in self.window]
        self.peak_tokens = max(self.peak_tokens, self.counter.count_messages(prompt))


def reconcile_with(world: World) -> Callable[[LedgerEntry], Any]:
    """The demo's reconcile hook: ask the booking system whether `client_ref` went through."""

    def hook(entry: LedgerEntry) -> Any:
        found = world.find(entry.args["client_ref"])
        return NOT_RUN if found is None else found

    return hook
