"""The facts about vLLM releases agree with each other and with the bundled schemas: adding a vLLM release means
touching them together (CONTRIBUTING.md, "Add a vLLM release")."""

import pytest
from packaging.version import Version

from vllm_repo.errors import UsageError
from vllm_repo.releases import backend_support, bundled, memory_budget, ngc
from vllm_repo.schema.loader import bundled_versions, choose_schema_version, release_key


def test_the_bundled_list_is_exactly_the_bundled_schemas():
    assert sorted(bundled.BUNDLED, key=Version) == list(bundled_versions())


def test_the_estimator_models_the_newest_bundled_release():
    assert bundled_versions()[-1] == bundled.NEWEST_KNOWN
    assert str(memory_budget.resolve_release(None)[0].version) in (bundled.NEWEST_KNOWN, *bundled_versions())


def test_the_schema_build_script_builds_the_bundled_list():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "build_schemas.py"
    spec = importlib.util.spec_from_file_location("build_schemas", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.BUNDLED is bundled.BUNDLED


def test_every_ngc_container_maps_to_a_bundled_schema_of_its_own_minor_release():
    newest = Version(bundled_versions()[-1])
    for release in ngc.RELEASES:
        vllm = Version(Version(release.vllm).base_version)
        if vllm < Version(bundled_versions()[0]):
            continue  # older than the oldest bundled schema: checked against the oldest, and validate says so
        assert vllm <= newest, f"NGC {release.release} ships vLLM {release.vllm}, newer than every bundled schema"
        chosen = Version(choose_schema_version(release.vllm).schema_version)
        assert (chosen.major, chosen.minor) == (vllm.major, vllm.minor), (release, chosen)


def test_backend_support_follows_the_range():
    min_vllm, newest_tested = backend_support.MIN_VLLM, backend_support.NEWEST_TESTED_VLLM
    oldest = ".".join(map(str, min_vllm))
    below = next(v for v in bundled_versions() if release_key(v) < min_vllm)
    assert backend_support.backend_support(below)[0] is False and oldest in backend_support.backend_support(below)[1]
    assert backend_support.backend_support(oldest)[0] is True
    newer = next((v for v in bundled_versions() if release_key(v)[:2] > newest_tested[:2]), None)
    if newer:
        supported, text = backend_support.backend_support(newer)
        assert supported and "tested up to" in text


def test_older_than_supported():
    assert backend_support.older_than_supported(None)  # an unknown vLLM
    assert backend_support.older_than_supported("0.11.0")
    assert not backend_support.older_than_supported(".".join(map(str, backend_support.MIN_VLLM)) + "+cpu")
    assert not backend_support.older_than_supported("not a version")


def test_ngc_container_matches_the_vllm_release():
    assert ngc.container_for_vllm("0.10.2").release.release == "25.10"
    exact = ngc.container_for_vllm("0.11.0+cu130")
    assert exact.exact and exact.release.image == "nvcr.io/nvidia/tritonserver:25.11-vllm-python-py3"
    newer = ngc.container_for_vllm("0.32.0")
    assert not newer.exact and newer.release == ngc.RELEASES[0] and "--vllm-version" in newer.reason
    with pytest.raises(UsageError):
        ngc.container_for_vllm("latest")
