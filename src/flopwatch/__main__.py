"""``python -m flopwatch``: the same CLI as the ``flopwatch`` console script (useful without installing)."""

from flopwatch.cli import main

if __name__ == "__main__":
    main()
