"""What every test folder may use: the fixtures of tests/support/fixtures.py. Helpers that tests share are in
tests/support/ and imported from there; no test module imports another."""

from __future__ import annotations

pytest_plugins = ["tests.support.fixtures"]
