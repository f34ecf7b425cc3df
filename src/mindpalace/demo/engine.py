"""The demo agent on mindpalace: one process's run of the task, resumable at any instruction.

Every step: ``resume`` → ``start_step`` → the policy's tool calls through the ledger → the
step's result indexed for recall → ``finish_step`` with its checkpoint (one atomic append).
A :class:`Crasher` can SIGKILL the process at numbered points (before/after the ledger's
``started`` row, right after the booking system committed, around the checkpoint) to prove
recovery.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mindpalace.demo.agent import (
    READ_ONLY_TOOLS,
    SYSTEM_PROMPT,
    EngineStepResult,
    Policy,
    reconcile_with,
)
from mindpalace.demo.scenario import BUDGET_PER_NIGHT_CNY, TOTAL_BUDGET_CNY, StepSpec, build_plan
from mindpalace.demo.world import World
from mindpalace.memory import Memory, Session
from mindpalace.tasks.events import ConstraintSet, GuardSet, PlanCreated
from mindpalace.tasks.state import TaskState

STEP_DOC_KIND = "demo_step"
SIDE_EFFECT_TOOLS = ("book_ticket", "book_hotel", "pay")
DEMO_SETTINGS: dict[str, Any] = {"embed": {"provider": "none"}, "steps": {"budget_tokens": 400}}
"""Keyword recall only (no model load); a small recent-tier budget B so compaction happens often."""
CRASH_POINTS_PER_STEP = 5
"""Roughly how many crash points one step passes (used to space random kills)."""


class Crasher:
    """Counts crash points; at the `die_after`-th one the process SIGKILLs itself (no cleanup,
    no flush — exactly like a kill -9 from outside)."""

    def __init__(self, die_after: int | None) -> None:
        self.die_after = die_after
        self.passed = 0

    def __call__(self, label: str) -> None:
        self.passed += 1
        if self.die_after is not None and self.passed >= self.die_after:
            os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """One demo run: where, how long, which seed, prompt budget (tokens)."""

    workspace: Path
    session: str
    steps: int
    seed: int
    budget_tokens: int = 2000

    @property
    def world_path(self) -> Path:
        return self.workspace / "demo" / f"{self.session}-world.db"

    @property
    def ack_path(self) -> Path:
        return self.workspace / "demo" / f"{self.session}-acks.log"

    @property
    def config_path(self) -> Path:
        """Where the run's parameters are kept, so ``mindpalace demo --resume`` can continue it."""
        return self.workspace / "demo" / f"{self.session}.json"

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, "steps": self.steps, "seed": self.seed,
                "budget_tokens": self.budget_tokens}


class EngineMind:
    """The policy's memory on mindpalace (see module docstring of :mod:`mindpalace.demo.agent`)."""

    def __init__(self, session: Session, world: World, crash: Callable[[str], None], ack: Callable[[int, str], None], budget_tokens: int) -> None:
        self.s = session
        self.task = session.task
        self.world = world
        self.crash = crash
        self.ack = ack
        self.budget_tokens = budget_tokens
        self.counter = session.memory.tokens
        self.state: TaskState = self.task.state()
        ledger = self.task.ledger
        ledger.mark_safe(*READ_ONLY_TOOLS)
        hook = reconcile_with(world)
        for tool in SIDE_EFFECT_TOOLS:
            ledger.reconciler(tool, hook)

    def refresh(self) -> TaskState:
        self.state = self.task.state()
        return self.state

    # -- Mind protocol ---------------------------------------------------------------------
    def booking(self, key: str) -> dict[str, Any] | None:
        return self.state.artifacts.get(key)

    def budget(self) -> int | None:
        c = self.state.constraints.get("budget_per_night_cny")
        return None if c is None else c.value

    def hotel_options(self, night: str) -> list[dict[str, Any]] | None:
        """Recall the earlier search for `night` by keyword search over indexed step results."""
        for hit in self.s.store.keyword_search(self.s.scope, f"search_hotel {night}", k=5, kinds=[STEP_DOC_KIND]):
            meta = hit.doc.meta
            if meta.get("kind") == "search_hotel" and meta.get("night") == night:
                return meta["data"]["hotels"]
        return None

    def tool(self, name: str, args: dict[str, Any], fn: Callable[..., Any], *, key: str | None = None) -> Any:
        def run(**kwargs: Any) -> Any:
            self.crash("tool:started")  # the ledger row is durable; the side effect not yet
            return fn(**kwargs)

        with self.task.tool_call(name, args, idempotent=name in READ_ONLY_TOOLS, key=key) as call:
            if call.done:
                return call.result
            result = call.run(run)
            self.ack(call.entry.version, "tool_call_completed")  # type: ignore[union-attr]
            return result

    def user_says(self, text: str, updates: dict[str, Any]) -> None:
        if any(f.text == text for f in self.state.feedback):
            return  # a retried step: the correction is already in the log
        self.task.constraints.feedback(text, updates=updates)
        self.refresh()

    def note(self, index: int, spec: StepSpec, text: str, data: Any) -> None:
        # Same ref on a retried step → replaced, never duplicated.
        self.s.store.index_document(
            self.s.scope, STEP_DOC_KIND, f"step_{index}", f"{spec.name}: {text}",
            {"kind": spec.kind, "night": spec.date, "step": index, "data": data},
        )

    # -- the prompt ------------------------------------------------------------------------
    def prompt(self, spec: StepSpec) -> list[dict[str, Any]]:
        """What the model would see before `spec`, from the context builder: user corrections on
        top, constraints verbatim, the step tiers (compacted as they grow), the checkpointed
        bookings in the system prompt, the next step as the user turn — never over budget."""
        bookings = {k: v.get("booking_id") or v.get("payment_id") for k, v in self.state.artifacts.items()}
        system = f"{SYSTEM_PROMPT}\nDone so far (checkpointed): {bookings}"
        built = self.s.context(self.budget_tokens, system_prompt=system,
                               messages=[{"role": "user", "content": f"Next step: {spec.name}"}])
        return built.messages


def start_task(session: Session, config: DemoConfig, plan: list[StepSpec]) -> None:
    """Create the task (plan, the user's constraints, the budget guard) in ONE atomic append;
    a second process racing to create it loses with ConcurrencyError."""
    session.task.record(
        PlanCreated(plan_id=f"tokyo-{config.seed}", steps=[p.name for p in plan]),
        ConstraintSet(name="budget_per_night_cny", value=BUDGET_PER_NIGHT_CNY, source="user",
                      note="5 days in Tokyo, 8000 CNY per person, about 2000 CNY per night for hotels"),
        ConstraintSet(name="total_budget_cny", value=TOTAL_BUDGET_CNY, source="user"),
        GuardSet(name="hotel-budget", tool="book_hotel", expr="price_per_night <= budget_per_night_cny", source="developer"),
        expected_version=0,
    )


def run_engine(
    config: DemoConfig,
    *,
    die_after: int | None = None,
    on_step: Callable[[int, int, EngineStepResult], None] | None = None,
) -> TaskState:
    """Run (or resume) the demo task to completion in this process; returns the final state.

    `die_after` SIGKILLs this process at that crash point (see :class:`Crasher`).
    """
    crash = Crasher(die_after)
    plan = build_plan(config.steps, config.seed)
    config.ack_path.parent.mkdir(parents=True, exist_ok=True)
    with Memory.open(config.workspace, **DEMO_SETTINGS) as mem, open(config.ack_path, "a", encoding="utf-8") as acks:

        def ack(version: int, etype: str) -> None:
            acks.write(f"{version} {etype}\n")
            acks.flush()  # in the OS page cache: survives a process kill

        world = World(config.world_path, after_commit=crash)
        try:
            s = mem.session(config.session, user="traveller", agent="planner")
            if s.task.version == 0:
                start_task(s, config, plan)
            s.steps.sweep_orphans("agent process restarted")  # a step begun before a crash
            mind = EngineMind(s, world, crash, ack, config.budget_tokens)
            policy = Policy(world, config.seed)
            resumed = s.task.resume()
            nxt = resumed.next_step
            while nxt is not None:
                i = nxt.index
                crash("step:begin")
                if not nxt.retry:
                    s.task.start_step(i, plan[i].name)
                crash("step:started")
                state = mind.refresh()
                prompt_tokens = mind.counter.count_messages(mind.prompt(plan[i]))
                tier_step = s.steps.begin(plan[i].name)
                outcome = policy.execute(mind, i, plan[i])
                s.steps.evaluate(tier_step, "success" if "no hotel" not in outcome.text else "failed",
                                 analysis=outcome.text)
                crash("step:before_finish")
                output = {"text": outcome.text, "prompt_tokens": prompt_tokens,
                          "budget_tokens": config.budget_tokens, "blocked": outcome.blocked}
                version = s.task.finish_step(i, output=output, artifacts=outcome.artifacts)
                ack(version, "checkpoint" if outcome.artifacts else "step_finished")
                crash("step:finished")
                if on_step is not None:
                    on_step(i, len(plan), EngineStepResult(i, plan[i].name, outcome.text, prompt_tokens, state.version))
                nxt = s.task.resume().next_step
            final = s.task.state()
            if final.status != "completed":
                s.task.complete(f"{len(plan)} steps; {sum(1 for k in final.artifacts if k.startswith(('ticket:', 'hotel:')))} bookings")
            return s.task.state()
        finally:
            world.close()
