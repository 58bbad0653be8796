"""validate: find the models a set of paths names, run every registered rule on them, and report the Diagnostics.

The pipeline, one module a step: vllm_repo.repository finds and loads the files, rules/ (registered in
rules/__init__.py, one module per code family) check them, runner.py collects the findings into a
ValidationResult, vllm_repo.diagnostics.reporters prints it as text, JSON or GitHub annotations. Usable from Python::

    from vllm_repo.validate import validate_paths
    result = validate_paths(["model_repository"], vllm_version="0.32.0")
    for d in result.diagnostics: print(d.code, d.message)
"""

from vllm_repo.repository import PathError
from vllm_repo.validate.runner import ValidationResult, fix_paths, validate_paths

__all__ = ["PathError", "ValidationResult", "fix_paths", "validate_paths"]
