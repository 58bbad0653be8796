"""init: scaffold a model of a Triton model repository that loads the first time (its templates are the
top-level templates/ folder, shipped as vllm_repo._templates)."""

from vllm_repo.scaffold.init import InitError, InitResult, default_model_name, init_model, parse_loras, parse_settings

__all__ = ["InitError", "InitResult", "default_model_name", "init_model", "parse_loras", "parse_settings"]
