"""``make bench``: measured figures for BENCHMARKS.md (run ``python -m bench``)."""
