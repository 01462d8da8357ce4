"""Central-difference gradient checks: settings, records, the one per-coordinate check, and its
batched, sampled and directional modes.
"""
