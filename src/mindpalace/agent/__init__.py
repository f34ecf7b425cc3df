"""The agent loop: any OpenAI-compatible model driving tools on a mindpalace session.

    >>> from mindpalace import Memory                                        # doctest: +SKIP
    >>> from mindpalace.agent import Agent, tool                             # doctest: +SKIP
    >>> @tool(side_effect=True)                                              # doctest: +SKIP
    ... def book_ticket(place: str, date: str) -> dict: ...
    >>> with Memory.open("./ws") as mem, Agent(mem.session("trip-42"), [book_ticket]) as agent:  # doctest: +SKIP
    ...     print(agent.run("Book Senso-ji for 2025-05-20").reply)

* :mod:`~mindpalace.agent.tools` — tools from plain callables, schemas from type hints;
* :mod:`~mindpalace.agent.loop` — :class:`Agent`, one turn = one step of the session's task.
"""

from mindpalace.agent.loop import Agent, AgentTurn, ToolOutcome, agent_llm
from mindpalace.agent.tools import Tool, as_tool, render_result, tool

__all__ = ["Agent", "AgentTurn", "Tool", "ToolOutcome", "agent_llm", "as_tool", "render_result", "tool"]
