"""init --gpu for a Hub model when the Hub can't be reached: the model is still written (exit 0), and the note that it
could not be sized comes with what would size it, as estimate says it (a local directory, HF_HUB_OFFLINE with the
config in the cache, HTTPS_PROXY)."""

from __future__ import annotations

import socket

from typer.testing import CliRunner

from vllm_repo.cli import build_app

REPO_ID = "some-org/not-cached-0.5b"


def test_init_says_how_to_size_a_model_it_could_not_reach(tmp_path, monkeypatch):
    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{closed}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    done = CliRunner().invoke(build_app(), ["init", str(tmp_path / "repo"), "--model", REPO_ID, "--gpu", "L4"])
    assert done.exit_code == 0, done.output
    assert "could not size the engine for L4" in done.output
    hint = next((line for line in done.output.splitlines() if "HTTPS_PROXY" in line), None)
    assert hint is not None, done.output
    assert "local" in hint and "HF_HUB_OFFLINE" in hint and f"hf download {REPO_ID} config.json" in hint
