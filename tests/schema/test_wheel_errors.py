"""A release's wheel that cannot serve schema generation is a WheelRouteError naming the wheel, and leaves no
half-unpacked sources behind."""

from __future__ import annotations

import zipfile

import pytest

from vllm_repo.errors import VllmRepoError
from vllm_repo.schema.wheel import WheelRouteError, unpack_sources


def test_a_wheel_without_a_vllm_package_is_refused_by_name(tmp_path):
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other/__init__.py", "")
        archive.writestr("vllm/_C.abi3.so", b"\0")  # compiled parts are never unpacked
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(WheelRouteError) as caught:
        unpack_sources(wheel, "9.9.9", cache)
    assert isinstance(caught.value, VllmRepoError)
    assert wheel.name in str(caught.value)
    assert not (cache / "src" / "9.9.9").exists()
    assert [p.name for p in cache.iterdir()] == []  # the temporary directory went too


def test_a_wheel_with_the_package_unpacks_its_python_sources_only(tmp_path):
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm/__init__.py", "")
        archive.writestr("vllm/_C.abi3.so", b"\0")
    cache = tmp_path / "cache"
    cache.mkdir()
    sources = unpack_sources(wheel, "9.9.9", cache)
    assert (sources / "vllm" / "__init__.py").is_file()
    assert not (sources / "vllm" / "_C.abi3.so").exists()
