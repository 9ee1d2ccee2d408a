"""The model's weights on every node: what the hub lists for each checkpoint (hub), the manifest
(manifest); where each goes is sparkctl/placement.py (below the facts, which ask it which folders a
node holds); the facts read each node's copy (facts/weights.py), the step places them (steps/weights.py)."""
