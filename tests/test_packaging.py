"""The wheel holds every package of the source tree: pyproject.toml lists packages explicitly (the bundled schemas
and templates are mapped in from the top level), and an editable install would hide a package left out."""

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_of_the_tree_is_in_the_wheel():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "vllm_repo").rglob("__init__.py")}
    assert on_disk <= listed, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
    mapped = setuptools["package-dir"]
    for package in listed - on_disk:
        top = package.split(".")[:2]
        source = ROOT / mapped[".".join(top)] / Path(*package.split(".")[2:])
        assert source.is_dir(), f"{package} is listed but {source} does not exist"


def test_the_bundled_data_is_where_the_package_reads_it():
    from vllm_repo.schema.loader import _schema_dir, bundled_versions

    assert _schema_dir().samefile(ROOT / "schemas" / "engine_args")
    assert len(bundled_versions()) == len(list((ROOT / "schemas" / "engine_args").glob("vllm-*.json")))
    from vllm_repo.schema.serve_options import bundled_path

    assert bundled_path().samefile(ROOT / "schemas" / "serve_options.json")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "*.json" in pyproject["tool"]["setuptools"]["package-data"]["vllm_repo._schemas"]
    # Triton's ModelConfig schema (vllm_repo.repository.model_config) ships beside them.
    assert "*.pb" in pyproject["tool"]["setuptools"]["package-data"]["vllm_repo._schemas"]
    assert (ROOT / "schemas" / "triton_model_config.pb").is_file()
