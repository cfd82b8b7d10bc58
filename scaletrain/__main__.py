import sys

from .cli import main

if __name__ == "__main__":  # spawned children import this module under another name
    sys.exit(main())
