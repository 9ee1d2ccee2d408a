"""A stdlib-only runtime simulator that speaks vLLM's and Ray's interfaces.

It runs inside the lab's minimal image (python3 + stdlib + busybox) as `vllm` and `ray`:
`python3 -m sparkctl_lab.sim.vllm_cli serve ...` and `python3 -m sparkctl_lab.sim.ray_cli start ...`.
It behaves like vLLM serving DeepSeek V4 Flash with tensor parallelism across two DGX Sparks:
start-up phases and compile caches, the OpenAI-compatible HTTP API, `/metrics`, speculative
decoding shaped like the seeds, and the seeds' failure modes. docs/simulator.md describes it.

Nothing here imports from the rest of sparkctl or from outside the standard library.
"""

VLLM_VERSION_DEFAULT = "0.33.0"
RAY_VERSION = "2.49.1"
