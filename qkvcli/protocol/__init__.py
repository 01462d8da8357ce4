"""The protocol between qkv and an implementation it judges: the wire, a program's client, Python's runner."""
