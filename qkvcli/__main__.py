"""``python -m qkvcli`` runs the ``qkv`` command."""

from qkvcli.cli import entry

if __name__ == "__main__":
    entry()
