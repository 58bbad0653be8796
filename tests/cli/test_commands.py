"""The CLI's command table: every command is reachable, and running one imports only its own module."""

import os
import re
import subprocess
import sys
from pathlib import Path

from vllm_repo.cli import COMMANDS, build_app


def test_command_table_wires_every_command_module_and_nothing_else():
    app = build_app()
    registered = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert registered == set(COMMANDS)
    modules = {module for module, _ in COMMANDS.values()}
    import vllm_repo.cli as cli

    on_disk = {p.stem for p in Path(cli.__file__).parent.glob("*.py")} - {"__init__", "handler", "options", "output"}
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
    shared = ["vllm_repo.cli.handler", "vllm_repo.cli.options"]  # the error handler, the options' factories
    assert done.stdout.strip().splitlines()[-1] == str([*shared, "vllm_repo.cli.validate"])


def test_help_lists_the_commands_in_the_order_of_the_work_and_the_readme_has_each():
    import re

    top = subprocess.run([sys.executable, "-m", "vllm_repo", "--help"], capture_output=True, text=True).stdout
    positions = [top.index(f" {name} ") for name in COMMANDS]
    assert positions == sorted(positions)
    # The README's map of the commands: one row each, in the same order, linking to its page under docs/.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("## Commands\n")
    table = readme[start : readme.index("\n## ", start + 1)]
    rows = re.findall(r"^\| \[`vllm-repo (\w+)`\]\((docs/[\w-]+\.md)(?:#[\w-]+)?\)", table, re.M)
    assert [name for name, _ in rows] == list(COMMANDS)


def test_version_and_the_long_spellings_of_shared_options():
    from vllm_repo import __version__

    done = subprocess.run([sys.executable, "-m", "vllm_repo", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"vllm-repo {__version__}"
    for command in ("init", "estimate"):
        wide = {**os.environ, "COLUMNS": "200"}  # the help table would cut the long name at 80 columns
        shown = subprocess.run(
            [sys.executable, "-m", "vllm_repo", command, "--help"], capture_output=True, text=True, env=wide
        )
        assert "--tensor-parallel-size" in shown.stdout, command


def test_flags_read_as_flags_and_repeatable_options_show_their_form():
    helps = {}
    for name in COMMANDS:
        helps[name] = subprocess.run(
            [sys.executable, "-m", "vllm_repo", name, "--help"], capture_output=True, text=True
        ).stdout
    assert all("<bool>" not in text for text in helps.values()), [n for n, t in helps.items() if "<bool>" in t]
    assert "--force " in helps["init"] and "--set KEY=VALUE" in helps["init"] and "--lora NAME=PATH" in helps["init"]
    assert "--select CODE" in helps["validate"] and "--param KEY=VALUE" in helps["infer"]
    # Help is plain text: no markup escape shows.
    assert all("\\[" not in text for text in helps.values()), [n for n, t in helps.items() if "\\[" in t]
    assert "[tool.vllm-repo]" in helps["plan"]


def test_the_openai_options_shared_with_launch_read_as_sentences_in_openai_help():
    text = subprocess.run([sys.executable, "-m", "vllm_repo", "openai", "--help"], capture_output=True, text=True)
    starts = dict(re.findall(r"^  (--[\w-]+)(?: \S+)?\s{2,}(\S)", text.stdout, re.M))
    assert {"--api-key", "--allowed-origins", "--allow-credentials"} <= starts.keys()
    assert all(c.isupper() for c in starts.values()), starts


def test_the_options_several_commands_take_are_declared_once():
    """--vllm-version, --gpu and the like come from cli/options.py's factories: one wording, one default rule."""
    import vllm_repo.cli as cli

    shared = (
        *("--vllm-version", "--gpu", "--num-gpus", "--force", "--diff", "--host", "--tp", "--api-key"),
        *("--slo", "--request-rate", "--output-len", "--dataset", "--seed"),
    )
    for path in Path(cli.__file__).parent.glob("*.py"):
        text = path.read_text()
        declared = [flag for flag in shared if re.search(rf"""typer\.Option\(\s*["']{flag}["']""", text)]
        assert path.name == "options.py" or not declared, f"{path.name} declares {declared}: use cli/options.py"


def test_every_vllm_version_option_states_the_same_default_rule():
    for name in ("validate", "estimate", "init", "plan", "schema show", "schema json-schema", "export kubernetes"):
        done = subprocess.run(
            [sys.executable, "-m", "vllm_repo", *name.split(), "--help"], capture_output=True, text=True
        )
        text = " ".join(done.stdout.split()).replace("vllm- version", "vllm-version")  # as help wraps the name
        assert "--vllm-version X.Y.Z vLLM release" in text, name
        assert "vllm-version in [tool.vllm-repo], else the serving Python's vLLM, else the installed one" in text, name


def test_bench_and_tune_refuse_the_same_load_mistakes_as_usage_errors(tmp_path):
    """The load options are read by one function for both commands: the same refusal, exit 2, before anything runs."""
    commands = {
        "bench": ["bench", "--url", "127.0.0.1:1", "--model", "m"],
        "tune": ["tune", str(tmp_path), "--slo", "ttft_p99_ms=1000"],
    }
    mistakes = {
        "not both": ["--concurrency", "1", "--request-rate", "2"],
        "a --dataset brings its own": ["--dataset", str(tmp_path / "prompts.jsonl"), "--input-len", "5"],
    }
    for command in commands.values():
        for words, extra in mistakes.items():
            done = subprocess.run(
                [sys.executable, "-m", "vllm_repo", *command, *extra], capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 2, (command, done.stderr)
            assert words in done.stderr
