"""One session's components rebuilt around a scripted LLM, for tests of a single component.

The facade wires every component to the workspace's configured provider; a test that scripts
the summarizer (``FakeLLM``) builds the component the same way, from the session's store, scope,
settings and token counter, with its own :class:`~mindpalace.summary.Summarizer`.
"""

from __future__ import annotations

from mindpalace.memory import Session
from mindpalace.session.consolidator import Consolidator
from mindpalace.settings import SessionSettings, StepSettings
from mindpalace.steps import StepMemory
from mindpalace.summary import Summarizer, SummaryModel


def summarizer(session: Session, llm: SummaryModel | None = None) -> Summarizer:
    """The session's summarizer, or one over `llm` with the workspace's ``[summary]`` settings."""
    mem = session.memory
    if llm is None:
        return mem.summarizer
    return Summarizer(llm, mem.tokens, settings=mem.settings.summary)


def step_memory(
    session: Session, llm: SummaryModel | None = None, *, settings: StepSettings | None = None
) -> StepMemory:
    """A :class:`StepMemory` of `session` that summarizes with `llm`."""
    mem = session.memory
    return StepMemory(session.store, session.scope, counter=mem.tokens,
                      summarizer=summarizer(session, llm), settings=settings or mem.settings.steps)


def consolidator(
    session: Session, llm: SummaryModel | None = None, *, settings: SessionSettings | None = None
) -> Consolidator:
    """A :class:`Consolidator` of `session` (same history and lock) that summarizes with `llm`."""
    mem = session.memory
    own = session.consolidator
    return Consolidator(session.store, session.scope, history=own.history,
                        counter=mem.tokens, summarizer=summarizer(session, llm),
                        settings=settings or mem.settings.session)
