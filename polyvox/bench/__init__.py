"""`polyvox bench`: what a benchmark client records, the metrics computed from it, the
machine's physical limits, the built-in texts, and the report (table, JSON, plots).

See ../shared/BENCHMARKS.md for how polyvox is measured.
"""
