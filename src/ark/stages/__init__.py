"""One Hydra entry point per DVC stage: ``python -m ark.stages.<name> [overrides]``, thin I/O around ``run(cfg)``."""
import functools
import sys


def clear_errors(main):
    """Bad input ends a stage with one line on stderr and exit status 2 instead of a traceback."""

    @functools.wraps(main)
    def wrapper(cfg):
        try:
            return main(cfg)
        except (FileNotFoundError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapper
