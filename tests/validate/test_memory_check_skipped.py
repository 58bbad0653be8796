"""VR602's note says what happened: validate reads no network, and the model's config.json is not in the local Hugging
Face cache; its hint's download command is one the installed Hub client has."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from tests.support.repo_builder import only, run


def test_the_note_says_validate_reads_no_network_and_names_no_setting_that_was_not_set(repo, tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty cache
    repo.model("remote", engine_args={"model": "example-org/never-downloaded-7b"})
    (d,) = only(run(repo.root, gpu="L4"), "VR602")
    assert "HF_HUB_OFFLINE" not in d.message and "offline mode" not in d.message and "network is off" not in d.message
    assert "example-org/never-downloaded-7b" in d.message and "local Hugging Face cache" in d.message
    assert "validate reads no network" in d.message


def test_the_hints_download_command_is_the_hub_clients_own(repo):
    # huggingface_hub installs `hf` beside the Python it is installed in (1.0 dropped `huggingface-cli`).
    repo.model("remote", engine_args={"model": "example-org/never-downloaded-7b"})
    (d,) = only(run(repo.root, gpu="L4"), "VR602")
    command = shlex.split(d.hint.split("`")[1])
    assert command == ["hf", "download", "example-org/never-downloaded-7b", "config.json"]
    assert (Path(sys.executable).parent / command[0]).is_file()
