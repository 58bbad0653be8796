"""The bundled backend's modules, shipped beside its model.py (``<backend directory>/vllm/vllm_repo_backend/``).

Triton's Python stub puts model.py's directory on sys.path and imports model.py as ``model``; model.py then imports
this package from beside it, by this name. The name is the project's own so that it cannot clash: a generic one
(Triton's own vLLM backend ships ``utils/``) shadows, or is shadowed by, a module of the same name wherever that
directory is on sys.path, as it is in Ray workers started with it on PYTHONPATH. And no object of these modules goes
to vLLM: what vLLM sends to its engine core and Ray workers, possibly on hosts without this directory, is unpickled
there by module name, so the backend hands vLLM only vLLM's own types and plain data.

The modules, one role each, import each other relatively (inside vllm-repo the package is
``vllm_repo.backend.vllm_repo_backend``):

- contract.py: the tensors, parameters, files, OpenAI routes and stream frames; the one source, which the rest of
  vllm-repo imports too, so it imports only the standard library.
- errors.py: a request that cannot be served, a model configuration that cannot be loaded, did-you-mean.
- log.py: log lines through Triton's logger, and thread names the OS shows.
- stub.py: Triton's ``triton_python_backend_utils``, where the backend runs in the stub.
- native.py: Triton's native requests: inputs and sampling parameters read and checked, output tensors assembled.
- configuration.py: config.pbtxt's parameters, model.json, multi_lora.json and the instance's GPUs.
- environment.py: the vLLM release and its APIs, the process's locale, loop and heap, and the server log.
- metrics.py: vLLM's stats collected where the engine runs, summed per bucket; metrics_report.py: reported to Triton
  as metric families, a bounded number of calls a second.
- per_token.py: a stream's merged output split into one output per token (STREAM_ONE_RESPONSE_PER_TOKEN).
- sends.py: the thread that sends responses off the engine loop.
- engine_link.py, engine_process.py: ENGINE_PROCESS, vLLM in a process of its own: the stub's side, and that process;
  send_order.py: the stub's responses sent in the order clients wait on them.
- engine_stop.py: vLLM's engine stopped at finalize within a bound, what is left of its processes killed.
- jobs.py: a request in flight (native or OpenAI) and the ids vLLM knows requests by.
- openai_wire.py: an OpenAI request's envelope, its error bodies, SSE joining and a gateway's stream socket.
- openai_app.py: openai.json checked with vllm serve's parser, and vLLM's OpenAI app built on the model's engine.
- openai_serving.py: vLLM's OpenAI app answering a model's OpenAI requests, wherever its engine runs.
"""
