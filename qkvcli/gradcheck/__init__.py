"""gradcheck."""
