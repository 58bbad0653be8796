"""What this tool knows about vLLM releases, one module per kind of fact:

- bundled.py: the releases whose EngineArgs schema is bundled (schemas/engine_args), why each is there, and the
  newest one known;
- ngc.py: which NGC ``tritonserver:<yy.mm>-vllm-python-py3`` container carries which vLLM (export, upgrade, docker);
- backend_support.py: what vllm-repo says about the releases the bundled Triton backend drives (the range itself is
  the backend's contract, which ships with it);
- memory_budget.py: what changes between releases in vLLM's GPU memory budget (the estimator's Release).

Adding a vLLM release starts here. The modules hold data and small lookups only: validate imports some of them on
every run, so nothing here imports grpc, an HTTP client, vLLM or torch.
"""
