"""``python -m qkvcli`` runs the ``qkv`` command."""

from qkvcli.cli import main

if __name__ == "__main__":
    main()
