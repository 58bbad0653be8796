"""The CLI's command table: every command is reachable, and running one imports only its own module."""

import subprocess
import sys

from vllm_repo.cli import COMMANDS, build_app


def test_command_table_wires_every_command_module_and_nothing_else():
    app = build_app()
    registered = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert registered == set(COMMANDS)
    modules = {module for module, _ in COMMANDS.values()}
    from pathlib import Path

    import vllm_repo.cli as cli

    on_disk = {p.stem for p in Path(cli.__file__).parent.glob("*.py")} - {"__init__", "handler", "output"}
    assert modules == on_disk  # a command module nobody wires would be dead code


def test_each_command_answers_help_and_top_level_help_lists_all():
    top = subprocess.run([sys.executable, "-m", "vllm_repo", "--help"], capture_output=True, text=True)
    assert top.returncode == 0
    for name in COMMANDS:
        assert f" {name} " in top.stdout
        sub = subprocess.run([sys.executable, "-m", "vllm_repo", name, "--help"], capture_output=True, text=True)
        assert sub.returncode == 0, (name, sub.stderr)


def test_running_a_command_imports_only_its_own_module():
    probe = (
        "import sys\n"
        "from vllm_repo.cli import main\n"
        "sys.argv = ['vllm-repo', 'rules']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('vllm_repo.cli.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(["vllm_repo.cli.handler", "vllm_repo.cli.validate"])
