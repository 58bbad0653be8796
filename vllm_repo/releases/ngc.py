"""Which NGC ``tritonserver:<yy.mm>-vllm-python-py3`` container carries which vLLM.

From the "Release Compatibility Matrix" (container vllm-python-py3) in Triton Inference Server's documentation
(docs/introduction/compatibility.md). NVIDIA builds vLLM from source with local version labels
("0.10.2+9dd9ca32.nv25.10.cu130"); only the public release number matters for EngineArgs, so that is what is kept.
"""

from __future__ import annotations

from typing import NamedTuple

from packaging.version import InvalidVersion, Version

from vllm_repo.errors import UsageError

IMAGE = "nvcr.io/nvidia/tritonserver"


class NgcRelease(NamedTuple):
    release: str  # "25.10"
    vllm: str  # public vLLM release in the image
    python: str

    @property
    def image(self) -> str:
        return f"{IMAGE}:{self.release}-vllm-python-py3"


# Newest first.
RELEASES: tuple[NgcRelease, ...] = (
    NgcRelease("26.08", "0.27.1", "3.12"),
    NgcRelease("26.07", "0.24.0", "3.12"),
    NgcRelease("26.06", "0.22.1", "3.12"),
    NgcRelease("26.05", "0.19.0", "3.12"),
    NgcRelease("26.04", "0.19.0", "3.12"),
    NgcRelease("26.03", "0.17.1", "3.12"),
    NgcRelease("26.02", "0.15.1", "3.12"),
    NgcRelease("26.01", "0.13.0", "3.12"),
    NgcRelease("25.12", "0.11.1", "3.12"),
    NgcRelease("25.11", "0.11.0", "3.12"),
    NgcRelease("25.10", "0.10.2", "3.12"),
    NgcRelease("25.09", "0.10.1.1", "3.12"),
    NgcRelease("25.08", "0.9.2", "3.12"),
    NgcRelease("25.07", "0.9.0rc1", "3.12"),
    NgcRelease("25.06", "0.9.0rc1", "3.12"),
    NgcRelease("25.05", "0.8.4", "3.12"),
    NgcRelease("25.04", "0.8.1", "3.12"),
    NgcRelease("25.03", "0.7.3", "3.12"),
    NgcRelease("25.02", "0.7.0", "3.12"),
    NgcRelease("25.01", "0.6.3.post1", "3.12"),
    NgcRelease("24.12", "0.5.5", "3.12"),
    NgcRelease("24.11", "0.5.5", "3.12"),
    NgcRelease("24.10", "0.5.5", "3.10"),
    NgcRelease("24.09", "0.5.3.post1", "3.10"),
    NgcRelease("24.08", "0.5.0.post1", "3.10"),
    NgcRelease("24.07", "0.5.0.post1", "3.10"),
    NgcRelease("24.06", "0.4.3", "3.10"),
    NgcRelease("24.05", "0.4.0.post1", "3.10"),
    NgcRelease("24.04", "0.4.0.post1", "3.10"),
)


class Match(NamedTuple):
    release: NgcRelease
    exact: bool  # same major.minor.micro as asked
    reason: str


def _base(version: str) -> Version:
    return Version(Version(version).base_version)


def container_for_vllm(vllm_version: str | None) -> Match:
    """The newest container whose vLLM is the same release as ``vllm_version`` (major.minor.micro), else the newest
    one with the same major.minor, else the newest one older than it, else the oldest. None: the newest container."""
    if vllm_version is None:
        newest = RELEASES[0]
        return Match(
            newest, False, f"no vLLM version known: the newest container, {newest.release} (vLLM {newest.vllm})"
        )
    try:
        want = _base(vllm_version)
    except InvalidVersion:
        raise UsageError(
            f"'{vllm_version}' is not a vLLM version number", hint="give a release such as 0.11.0"
        ) from None
    for rel in RELEASES:
        if _base(rel.vllm) == want:
            return Match(rel, True, f"{rel.release} carries vLLM {rel.vllm}")
    for rel in RELEASES:
        if _base(rel.vllm).release[:2] == want.release[:2]:
            return Match(
                rel, False, f"no container has vLLM {want}; {rel.release} has the same minor release, {rel.vllm}"
            )
    older = [rel for rel in RELEASES if _base(rel.vllm) < want]
    if older:
        rel = older[0]
        return Match(
            rel,
            False,
            f"no container has vLLM {want} yet; the newest, {rel.release}, has vLLM {rel.vllm}: "
            f"check the repository with `vllm-repo validate --vllm-version {rel.vllm}`",
        )
    rel = RELEASES[-1]
    return Match(
        rel,
        False,
        f"vLLM {want} is older than any vllm-python-py3 container; the oldest is {rel.release} (vLLM {rel.vllm})",
    )
