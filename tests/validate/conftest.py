import pytest

from tests.support.repo_builder import RepoBuilder


@pytest.fixture
def repo(tmp_path) -> RepoBuilder:
    return RepoBuilder(tmp_path / "model_repository")
