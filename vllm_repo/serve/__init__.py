"""Serving a repository: `vllm-repo launch` and `vllm-repo infer`.

- launch_plan.py: validate the tree and plan the run (server, serving Python, ports, CPU settings), starting nothing;
  launch.py: run the plan until a signal;
- server.py: one tritonserver process group (TritonServer), stopped as a group, its shared memory removed;
- server_files.py: where the server comes from (embedded nvidia-pytriton wheel, PATH, --tritonserver) and the
  backend directory laid out for it; python_env.py: the serving Python, probed by running it;
- ports.py: the default ports and checks; processes.py: the group's processes and segments in /proc and /dev/shm;
  claims.py: what two servers on one machine could both take (ports, Triton's /tmp/python_env_*), claimed for one;
- shm_watch.py and guardian.py: shared memory the group leaves, and a watchdog that stops it if launch is killed;
- load_hang.py: a load Triton 2.51 never finishes after the backend said ready, told from the log (launch, doctor);
- ray_cluster.py: launch --ray-address's check that a Ray cluster holds the placement groups vLLM will ask for;
  ray_placement.py: the pure part, where the engines go and what the other hosts run;
- probes/: the scripts run by path in the serving Python (python_probe.py, ray_probe.py) and run_probe;
- docker.py: the same repository in the NGC container whose vLLM matches (releases/ngc.py);
- triton_client.py: the client of Triton's HTTP API (health, readiness, the repository index, model control,
  generate_stream, also on asyncio) with the vLLM backend's inputs and outputs, typed; triton_grpc.py: its gRPC
  streaming, on streams kept open (bench's native client);
- infer.py: `vllm-repo infer`, one completion streamed through triton_client.py;
- openai/: the OpenAI API in front of Triton (launch --openai-port, vllm-repo openai), answered by vLLM's own
  OpenAI layer inside each model's backend.
"""
