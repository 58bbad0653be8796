"""The newest-known release constants agree with the bundled schemas: adding a vLLM release means touching them
together (CONTRIBUTING.md, "Add a vLLM release")."""

from packaging.version import Version

from vllm_repo.estimate.releases import NEWEST_KNOWN
from vllm_repo.schema.loader import bundled_versions, choose_schema_version
from vllm_repo.serve import ngc


def test_the_estimator_models_the_newest_bundled_release():
    assert bundled_versions()[-1] == NEWEST_KNOWN


def test_every_ngc_container_maps_to_a_bundled_schema_of_its_own_minor_release():
    newest = Version(bundled_versions()[-1])
    for release in ngc.RELEASES:
        vllm = Version(Version(release.vllm).base_version)
        if vllm < Version(bundled_versions()[0]):
            continue  # older than the oldest bundled schema: checked against the oldest, and validate says so
        assert vllm <= newest, f"NGC {release.release} ships vLLM {release.vllm}, newer than every bundled schema"
        chosen = Version(choose_schema_version(release.vllm).schema_version)
        assert (chosen.major, chosen.minor) == (vllm.major, vllm.minor), (release, chosen)


def test_the_schema_build_script_lists_exactly_the_bundled_releases():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "build_schemas.py"
    spec = importlib.util.spec_from_file_location("build_schemas", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert sorted(module.RELEASES, key=Version) == list(bundled_versions())
