"""tune's tests: the search as pure logic (test_search), tune's run with stand-ins for the server and bench
(``fake_world``, tests/support/tune_world.py), and tune against a real server (test_tune_e2e), on the serving tests'
repository of the tiny model."""

from tests.support.tune_world import fake_world  # noqa: F401  (the fixture, for this folder's tests)
