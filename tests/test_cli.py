"""The CLI's command table: every command is reachable, and running one imports only its own module."""

import importlib
import subprocess
import sys

from vllm_repo.cli import COMMAND_MODULES, app


def test_command_table_lists_every_registered_command():
    for module in set(COMMAND_MODULES.values()):
        importlib.import_module(f"vllm_repo.cli.{module}")
    registered = {c.name or c.callback.__name__ for c in app.registered_commands}
    registered |= {g.name for g in app.registered_groups}
    assert registered == set(COMMAND_MODULES)


def test_each_command_answers_help_and_top_level_help_lists_all():
    top = subprocess.run([sys.executable, "-m", "vllm_repo", "--help"], capture_output=True, text=True)
    assert top.returncode == 0
    for name in COMMAND_MODULES:
        assert f" {name} " in top.stdout
        sub = subprocess.run([sys.executable, "-m", "vllm_repo", name, "--help"], capture_output=True, text=True)
        assert sub.returncode == 0, (name, sub.stderr)
