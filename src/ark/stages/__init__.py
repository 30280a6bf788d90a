"""One Hydra entry point per DVC stage: ``python -m ark.stages.<name> [overrides]``, thin I/O around ``run(cfg)``."""
import errno
import functools
import os
import sqlite3
import sys

from ark.errors import IncompleteRun, RunFailed, UserError


def launch(main) -> None:
    """Run a stage's Hydra ``main`` after checking its command-line overrides (``ark.config.check_overrides``): a bad
    one is one ``error:`` line and exit status 2, like any other bad input."""
    from ark.config import check_overrides

    try:
        check_overrides(sys.argv[1:])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    main()


FULL = (errno.ENOSPC, errno.EDQUOT)  # a full disk or quota


def clear_errors(main):
    """A ``UserError`` ends a stage with one line on stderr and exit status 2; a run with incomplete queries, or one
    that failed (``RunFailed``), with one line and exit status 1. Anything else is a bug and keeps its traceback."""

    @functools.wraps(main)
    def wrapper(cfg):
        try:
            return main(cfg)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except IncompleteRun as e:
            print(f"incomplete: {e}", file=sys.stderr)
            sys.exit(1)
        except RunFailed as e:
            print(f"failed: {e}", file=sys.stderr)
            sys.exit(1)
        except KeyboardInterrupt:
            print("interrupted: what was done is kept; the same command resumes it", file=sys.stderr)
            sys.exit(130)
        except OSError as e:
            if e.errno not in FULL:
                raise
            print(f"error: no space left to write {e.filename or 'a file'} ({os.strerror(e.errno)}); free some "
                  "and rerun: what was done is kept", file=sys.stderr)
            sys.exit(2)
        except sqlite3.OperationalError as e:
            if "full" not in str(e):
                raise
            print(f"error: an SQLite file (the LLM cache or a spend ledger) is full ({e}); free some space and "
                  "rerun: what was done is kept", file=sys.stderr)
            sys.exit(2)

    return wrapper
