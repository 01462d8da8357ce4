"""rich."""
