"""The inventory: models, safe loading and validation with operator-readable errors."""
