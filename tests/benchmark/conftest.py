"""bench's tests: the statistics as pure logic (test_stats), and bench against a real server (test_bench_e2e), on the
serving tests' repository of the tiny model."""
