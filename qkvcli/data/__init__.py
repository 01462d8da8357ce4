"""Files shipped inside the package: the bundled chapter and primer fixtures and the fixture JSON Schema.
"""
