"""The launch: what sparkctl starts on the hosts, derived from the inventory alone and touching no
host. The plan (every container's spec and config hash, plan.py), the names it gives them (the
engine's labels and ports, the gateway's place on the head, the keeper's unit and files, a fleet's
front door), where they reach each other (endpoints.py), and the gateway's code as shipped.

Below the facts, which compare what runs with it; runtime/ and the steps act on it. launch/gateway.py
is shipped to the head with the gateway (gateway_code.py): standard library only.
"""
