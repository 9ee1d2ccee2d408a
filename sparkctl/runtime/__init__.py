"""The inference runtime: launch specs (vLLM + Ray), health, metrics, logs."""
