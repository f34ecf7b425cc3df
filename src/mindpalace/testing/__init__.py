"""Test support shipped with the package: deterministic fakes (and, later, conformance suites)."""
