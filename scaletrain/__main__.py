import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while Python starts: no traceback for it
    sys.exit(130)

if __name__ == "__main__":  # spawned children import this module under another name
    sys.exit(main())
