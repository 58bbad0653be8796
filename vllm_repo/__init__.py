"""vllm-repo: scaffold, validate, size and serve Triton Inference Server model repositories for the vLLM backend."""

__version__ = "0.1.0"
