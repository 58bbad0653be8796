"""tune's tests: the search as pure logic (test_search), and tune against a real server (test_tune_e2e), on the
serving tests' repository of the tiny model."""
