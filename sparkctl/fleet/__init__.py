"""Fleets: several clusters behind one front door, changed one member at a time (docs/fleets.md)."""
