"""The reports of the course's attention chapters 27–30, one module a chapter."""
