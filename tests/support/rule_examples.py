"""A rule's documented example written to disk as validate reads it, and what running it needs."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

VERSION = "0.32.0"


REPOSITORY_DIR = "model_repository"


# What an example needs beyond its files, by code family: the memory-fit rules run only when a GPU is known. The
# rule's docs must tell the reader the same ("Run ... with --gpu L4").
OPTIONS: dict[str, dict[str, str]] = {"VR6": {"gpu": "L4"}}


def write_example(root: Path, example: dict[str, str]) -> Path:
    """Write the example's files under ``root``; return the directory to validate."""
    for name, text in example.items():
        rel = PurePosixPath(name)
        assert not rel.is_absolute() and ".." not in rel.parts, f"example path {name!r} leaves the example root"
        path = root.joinpath(*rel.parts)
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    repository = root / REPOSITORY_DIR
    return repository if repository.is_dir() else root
