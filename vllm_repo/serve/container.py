"""What serving in an NGC ``tritonserver:<yy.mm>-vllm-python-py3`` container means, for ``launch --docker`` and for
``export kubernetes`` alike: which container (the one whose vLLM is the repository's release, by validate's rule), the
release the repository is checked against (the container's own), whether the bundled backend drives that vLLM, and
the tritonserver command line inside the container.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vllm_repo.releases.ngc import Match, container_for_vllm

# Where the repository is mounted in the container, and where the NGC image keeps Triton's backends (its own vLLM
# backend is BACKENDS_DIR/vllm/model.py; `vllm-repo backend install BACKENDS_DIR` puts the bundled one there).
CONTAINER_REPOSITORY = "/models"
BACKENDS_DIR = "/opt/tritonserver/backends"


@dataclasses.dataclass(frozen=True)
class ContainerChoice:
    """The container for a repository, and why."""

    match: Match
    wanted: str | None  # the repository's vLLM release (validate's rule), None when none is known
    origin: str  # where ``wanted`` comes from

    @property
    def image(self) -> str:
        return self.match.release.image

    @property
    def vllm(self) -> str:
        """The vLLM release in the container: the one the repository is validated against."""
        return self.match.release.vllm

    @property
    def bundled_backend(self) -> bool:
        """Whether the bundled backend drives the container's vLLM (else the container's own backend serves)."""
        from vllm_repo.releases.backend_support import older_than_supported

        return not older_than_supported(self.vllm)

    @property
    def note(self) -> str:
        origin = f"vLLM {self.wanted} from {self.origin}" if self.wanted else self.origin
        return f"container {self.image}: {self.match.reason} ({origin})"

    def other_release(self) -> str | None:
        """Why the container's vLLM is not the repository's release, where it is not (None where it is)."""
        if self.wanted is None or self.match.exact:
            return None
        return (
            f"the repository targets vLLM {self.wanted} ({self.origin}) but {self.match.release.release} carries "
            f"vLLM {self.vllm}: it is validated against {self.vllm}, the release that will run it"
        )

    def own_backend(self) -> str | None:
        """Why the bundled backend cannot drive the container's vLLM, where it cannot (None where it can)."""
        if self.bundled_backend:
            return None
        from vllm_repo.releases.backend_support import backend_support

        return backend_support(self.vllm)[1]


def choose_container(vllm_version: str | None, repository: str | Path | None = None) -> ContainerChoice:
    """The container whose vLLM is the repository's release: --vllm-version, else the project settings above
    ``repository``, the serving Python's vLLM or the installed one (validate's rule, schema/loader.py)."""
    from vllm_repo.schema.loader import target_vllm_version

    start = Path(repository).absolute() if repository is not None else None
    wanted, origin = target_vllm_version(vllm_version, start)
    return ContainerChoice(container_for_vllm(wanted), wanted, origin)


def server_args(
    http_port: int, grpc_port: int, metrics_port: int, *, address: str | None = None, extra: tuple[str, ...] = ()
) -> list[str]:
    """tritonserver's command line in the container: the repository at CONTAINER_REPOSITORY, the three ports, and
    with ``address`` each endpoint bound to it."""
    args = [
        "tritonserver",
        f"--model-repository={CONTAINER_REPOSITORY}",
        f"--http-port={http_port}",
        f"--grpc-port={grpc_port}",
        f"--metrics-port={metrics_port}",
    ]
    if address is not None:
        args += [f"--http-address={address}", f"--grpc-address={address}", f"--metrics-address={address}"]
    return [*args, *extra]
