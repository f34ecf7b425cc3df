"""`mindpalace demo`: a deterministic long-horizon travel agent (seed 004) that survives crashes.

:func:`run_demo` runs it on the engine (optionally under seeded SIGKILLs), :func:`run_baseline`
runs the same scripted policy with seed 004's sliding-window memory; both return a
:class:`DemoReport`.
"""

from mindpalace.demo.engine import DemoConfig, run_engine
from mindpalace.demo.runner import DemoReport, fresh_config, resume_config, run_baseline, run_demo

__all__ = [
    "DemoConfig", "DemoReport", "fresh_config", "resume_config", "run_baseline", "run_demo", "run_engine",
]
