"""Runs the store conformance suite (mindpalace.testing.conformance) on every backend."""

from __future__ import annotations

from mindpalace.testing.conformance import (
    TestBadInput,
    TestEvents,
    TestKeyValue,
    TestKeywordSearch,
    TestRecords,
    TestTransactions,
    TestVectors,
)

__all__ = [
    "TestBadInput",
    "TestEvents",
    "TestKeyValue",
    "TestKeywordSearch",
    "TestRecords",
    "TestTransactions",
    "TestVectors",
]
