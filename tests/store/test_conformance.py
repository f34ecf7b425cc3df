"""Runs the store conformance suite (mindpalace.testing.conformance) on every backend."""

from __future__ import annotations

from mindpalace.testing.conformance import (
    TestBadInput,
    TestDocuments,
    TestEvents,
    TestKeyValue,
    TestKeywordSearch,
    TestLocks,
    TestProcesses,
    TestRecords,
    TestScopeIsolation,
    TestTransactions,
    TestVectors,
)

__all__ = [
    "TestBadInput",
    "TestDocuments",
    "TestEvents",
    "TestKeyValue",
    "TestKeywordSearch",
    "TestLocks",
    "TestProcesses",
    "TestRecords",
    "TestScopeIsolation",
    "TestTransactions",
    "TestVectors",
]
