"""What the tests share: builders of repositories and model directories, the serving environment, servers started
and stopped as a user does, clients of them, and the session's fixtures (fixtures.py, registered by
tests/conftest.py). Test modules import from here, never from each other."""
