"""Test helpers shipped with clew: a deterministic fake encoder and conformance suites."""
