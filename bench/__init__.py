"""Benchmarks run by hand from the repository root, each as `python -m bench.NAME` (bench/README.md)."""
