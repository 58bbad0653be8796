"""The README's commands work as written for someone who has this checkout: vllm-repo is not on PyPI, and every
`vllm-repo` command it shows exists."""

import re
from pathlib import Path

from vllm_repo.cli import COMMANDS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
CODE = "\n".join(re.findall(r"```(?:bash|console|yaml)?\n(.*?)```", README, re.S))


def test_no_install_from_an_index_that_does_not_have_it():
    assert not re.search(r"pip install\s+['\"]?vllm-repo\b", README), "vllm-repo is installed from a checkout or wheel"


def test_every_command_the_readme_runs_exists():
    used = set(re.findall(r"(?:^|\s|\$ )vllm-repo ([a-z]+)", CODE, re.M))
    assert used and used <= set(COMMANDS), used - set(COMMANDS)
