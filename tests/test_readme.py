"""The README and the reference under docs/ work as written for someone who has this checkout: vllm-repo is not on
PyPI, every `vllm-repo` command they show exists, the README keeps the test command CI runs, and every relative link
(and its #anchor) leads somewhere."""

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from vllm_repo.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
# Everything a reader follows links through.
PAGES = [README, ROOT / "CONTRIBUTING.md", ROOT / "bench" / "README.md", *DOCS]


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def code_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```(?:bash|console|yaml)?\n(.*?)```", text, re.S))


def slugs(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = 0
        while (candidate := slug if n == 0 else f"{slug}-{n}") in found:
            n += 1
        found.add(candidate)
    return found


def links(text: str) -> list[str]:
    """The targets of a page's Markdown links outside code, except web and mail addresses."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def test_the_reference_pages_exist():
    assert (ROOT / "docs" / "README.md") in DOCS and len(DOCS) > 10


@pytest.mark.parametrize("page", [README, *DOCS], ids=name)
def test_no_install_from_an_index_that_does_not_have_it(page):
    text = page.read_text()
    assert not re.search(r"pip install\s+['\"]?vllm-repo\b", text), "vllm-repo is installed from a checkout or wheel"


@pytest.mark.parametrize("page", [README, *DOCS], ids=name)
def test_every_command_a_page_runs_exists(page):
    code = code_blocks(page.read_text())
    used = set(re.findall(r"(?:^|\s|\$ )vllm-repo ([a-z]+)", code, re.M))
    assert used <= set(COMMANDS), used - set(COMMANDS)


def test_the_readme_runs_commands_and_keeps_the_test_command_ci_runs():
    code = code_blocks(README.read_text())
    assert re.findall(r"(?:^|\s|\$ )vllm-repo ([a-z]+)", code, re.M)
    assert re.search(r"^bash scripts/test\.sh\b", code, re.M)
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_leads_to_a_file_and_its_anchor(page):
    broken = []
    for target in links(page.read_text()):
        path, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in slugs(dest.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {name(dest)}")
    assert broken == []


def test_links_are_found_and_anchors_made_as_github_makes_them():
    page = "See [the docs](docs/a.md#which-vllm-release), `[not](a link)`, [web](https://example.com).\n"
    assert links(page) == ["docs/a.md#which-vllm-release"]
    headings = "# Moving from Triton's vLLM backend\n## In an NGC container: --docker\n## Which vLLM release\n"
    assert slugs(headings) == {"moving-from-tritons-vllm-backend", "in-an-ngc-container---docker", "which-vllm-release"}
