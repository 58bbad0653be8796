"""vLLM's EngineArgs, release by release: what a model.json may hold.

- loader.py: the bundled schemas (the top-level schemas/ folder, shipped as vllm_repo._schemas) and which release
  a run checks against;
- history.py: which releases have which key, and what replaced the ones that went away;
- json_schema.py: a JSON Schema of model.json for editors; info.py: what `schema show` and `schema list` print;
- generate.py: a release's schema from an importable vLLM (the only module that imports vLLM), run in the
  interpreter that has it, with annotations.py mapping each field's annotation to JSON types (typing objects only,
  no vLLM); wheel.py: the same from a release's PyPI wheel, with compat.py's library shims.

Nothing is imported here: generate.py and annotations.py run inside other interpreters, where only the standard
library is sure to be.
"""
