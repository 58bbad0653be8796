import pytest

from tests.validate.helpers import RepoBuilder


@pytest.fixture
def repo(tmp_path) -> RepoBuilder:
    return RepoBuilder(tmp_path / "model_repository")
