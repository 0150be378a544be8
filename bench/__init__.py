"""Benchmarks: ratios measured side by side (``make bench``); not tests."""
