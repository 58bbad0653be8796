"""The serving tests' fixtures: tiny_model, the real tiny model, tiny_repository, a repository made by init for it,
and hf_model, a config-only model directory, are tests/support/fixtures.py's; the serving environment and the CLI
as a test runs it are tests/support/serving.py's."""
