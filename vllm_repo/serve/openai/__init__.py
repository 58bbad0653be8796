"""The OpenAI API for every vLLM model of a Triton server (``vllm-repo openai``, ``launch --openai-port``).

- triton.py: the gRPC side, one decoupled stream per OpenAI request, carried in the backend's openai_request input;
- catalog.py: which Triton model answers for a ``model`` name (served names and LoRA adapters, from the backends);
- stream_socket.py: the Unix socket a backend on the same host writes streamed answers to, instead of a Triton
  response per chunk;
- app.py: the HTTP routes, ``--api-key``, and the copy of each backend response to the client as it arrives;
- cors.py: what pages of other origins may call, answered as vllm serve's CORS options answer;
- gateway.py: running it, alone or as launch's child.
"""

from vllm_repo.serve.openai.cors import CorsPolicy
from vllm_repo.serve.openai.gateway import (
    API_KEY_ENV,
    DEFAULT_OPENAI_PORT,
    GatewayError,
    StreamSocketMode,
    base_url,
    grpc_address,
    metrics_url,
    print_ready,
    run_gateway,
    serve,
)

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_OPENAI_PORT",
    "CorsPolicy",
    "GatewayError",
    "StreamSocketMode",
    "base_url",
    "grpc_address",
    "metrics_url",
    "print_ready",
    "run_gateway",
    "serve",
]
