"""Token counting: exact tiktoken counts offline, or a script-aware estimate that errs high (I9)."""

from mindpalace.tokens.counter import (
    EstimateCounter,
    TiktokenCounter,
    TokenCounter,
    get_counter,
)

__all__ = ["EstimateCounter", "TiktokenCounter", "TokenCounter", "get_counter"]
