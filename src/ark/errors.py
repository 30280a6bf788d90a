"""The one user-facing error type.

A ``UserError`` is bad input or a missing prerequisite that the user can fix: a stage prints its message
on one line and exits 2 (``ark.stages.clear_errors``). Any other exception is a bug and keeps its traceback.
It subclasses ``ValueError`` so that library callers catching ``ValueError`` keep working.
"""


class UserError(ValueError):
    pass


class IncompleteRun(RuntimeError):
    """A run finished with queries whose model calls failed after their retries (exit 1; rerunning resumes)."""


class RunFailed(RuntimeError):
    """A run whose results cannot be trusted, e.g. a tool that failed on most queries (exit 1, one line; no metrics
    are written)."""
