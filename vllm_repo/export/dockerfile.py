"""The image `export kubernetes` serves with: the NGC ``tritonserver:<yy.mm>-vllm-python-py3`` container whose vLLM
the repository was validated against, plus vllm-repo, whose bundled backend replaces the container's own vLLM backend
(``vllm-repo backend install /opt/tritonserver/backends``) and whose OpenAI gateway the pod can run beside Triton.

vllm-repo and its dependencies go into a virtual environment of their own that sees the image's packages
(--system-site-packages): pip adds what is missing there and changes nothing the image's vLLM was built with. The
backend it installs runs in Triton's Python stub, beside the image's vLLM; it imports nothing of vllm-repo.

The Dockerfile names its paths in ARGs, so the install step can be run as written into any directory (the tests do).
"""

from __future__ import annotations

import dataclasses
import shlex

from vllm_repo.serve.container import BACKENDS_DIR

VLLM_REPO_HOME = "/opt/vllm-repo"
WHEELS_DIR = "/tmp/vllm-repo-wheels"
DOCKERFILE = "Dockerfile"


def vllm_repo_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("vllm-repo")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
        return "0.0.0"


def wheel_name(version: str) -> str:
    """The file name `pip wheel` gives vllm-repo's wheel (a pure-Python wheel; '-' in the name becomes '_')."""
    return f"vllm_repo-{version}-py3-none-any.whl"


@dataclasses.dataclass(frozen=True)
class ImageBuild:
    """The Dockerfile of the serving image, and how to build it."""

    base: str  # the NGC container it starts from
    image: str  # the tag it is built as: the image the pods run
    wheel: str  # vllm-repo's wheel, beside the Dockerfile
    text: str

    def commands(self, source: str = "/path/to/vllm-repo", directory: str = ".") -> list[str]:
        """Shell commands that build the image from ``directory`` (the one holding the Dockerfile): the wheel of the
        vllm-repo checkout ``source`` first, then docker build."""
        d = shlex.quote(directory)
        commands = [
            f"pip wheel --no-deps -w {d} {shlex.quote(source)}   # writes {self.wheel}",
            f"docker build -t {shlex.quote(self.image)} {d}",
        ]
        # A name without a registry would be pushed to Docker Hub's library, where the nodes will not find it.
        return commands if self.registry_hint else [*commands, f"docker push {shlex.quote(self.image)}"]

    @property
    def registry_hint(self) -> str | None:
        """What to do when the image names no registry (a local name: nothing to push it to); None when it does."""
        if "/" in self.image:
            return None
        return (
            f"the image {self.image} names no registry, so there is nothing to push it to: export again with "
            f"--image REGISTRY/{self.image} to build it for your registry, or load it into the nodes yourself"
        )


def install_step() -> str:
    """The Dockerfile's RUN line (without RUN): a virtual environment for vllm-repo, the wheel into it, then the
    bundled backend into Triton's backends directory in place of the container's own vLLM backend."""
    return " \\\n    && ".join(
        [
            'python3 -m venv --without-pip --system-site-packages "${VLLM_REPO_HOME}"',
            'python3 -m pip --python "${VLLM_REPO_HOME}/bin/python" install --no-cache-dir '
            '"${WHEELS}/${VLLM_REPO_WHEEL}"',
            '"${VLLM_REPO_HOME}/bin/vllm-repo" backend install "${TRITON_BACKENDS}" --force',
            'rm -r "${WHEELS}"',
        ]
    )


def dockerfile(base: str, image: str, version: str, *, ray: bool = False) -> ImageBuild:
    """The Dockerfile that builds ``image`` from ``base`` and vllm-repo ``version``; with ``ray``, one whose image
    must have Ray (the LeaderWorkerSet's pods run `ray start`): the build fails when the base image lacks it."""
    wheel = wheel_name(version)
    lines = [
        "# syntax=docker/dockerfile:1",
        "# Triton's vLLM container with vllm-repo: the bundled backend replaces the container's own vLLM backend, and",
        "# `vllm-repo openai` serves the OpenAI and Anthropic APIs beside Triton. Build it from this directory, with",
        f"# vllm-repo's wheel ({wheel}) beside this file: see the comments of the manifests.",
        f"FROM {base}",
        f"ARG VLLM_REPO_WHEEL={wheel}",
        f"ARG VLLM_REPO_HOME={VLLM_REPO_HOME}",
        f"ARG TRITON_BACKENDS={BACKENDS_DIR}",
        f"ARG WHEELS={WHEELS_DIR}",
        'COPY ["${VLLM_REPO_WHEEL}", "${WHEELS}/"]',
        f"RUN {install_step()}",
    ]
    if ray:
        lines += [
            "# The LeaderWorkerSet's pods start a Ray cluster: the image's Python must have Ray.",
            'RUN python3 -c "import ray"',
        ]
    # Appended, not prepended: `python3` and Ray's commands stay the image's own.
    lines.append(f'ENV PATH="${{PATH}}:{VLLM_REPO_HOME}/bin"')
    return ImageBuild(base=base, image=image, wheel=wheel, text="\n".join(lines) + "\n")


def default_image(base_release: str, version: str) -> str:
    """The tag the image is built as when --image does not name one (a local name: push it and pass --image)."""
    return f"vllm-repo-tritonserver:{base_release}-vllm-repo{version}"
