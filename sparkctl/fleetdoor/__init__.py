"""The fleet's front door: one URL in front of several clusters' gateways (`python -m sparkctl.fleetdoor`).

It runs from a member's engine image, like the gateway, so its modules import only the standard
library, aiohttp, prometheus_client and `sparkctl.gateway` (shipped beside it): never the rest of
sparkctl. docs/fleets.md ("The front door's routing") says how it picks a member.
"""
