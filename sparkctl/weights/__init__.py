"""The model's weights on every node: where each checkpoint goes (placement), what the hub lists
for it (hub); the facts read each node's copy (facts/weights.py), the step places them (steps/weights.py)."""
