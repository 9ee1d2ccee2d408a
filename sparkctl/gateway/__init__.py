"""The front door: an HTTP gateway in front of the engine (`python -m sparkctl.gateway`).

It runs from the engine's image (vLLM 0.33 ships aiohttp and prometheus_client), so its modules
import only the standard library, aiohttp and prometheus_client: never the rest of sparkctl.
docs/gateway.md says what it holds, for how long, and what a client sees.
"""
