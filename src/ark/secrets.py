"""The keys a run knows, and the one scrub that keeps them out of what it stores: every model reply
(``ark.llm.client``) and what W&B logs (``ark.tracking``).

A key is the value of the variable a backbone names (``api_key_env``) or of any environment variable whose name
says it holds a secret (KEY, TOKEN, SECRET, PASSW, CREDENTIAL); of the latter, values shorter than ``MIN_CHARS`` are
not keys (``1``, ``true``).
Some providers and proxies echo the key back (in an error body, or a model repeating its prompt): every string
of a reply is scrubbed before it is cached, returned to the agent or logged. With no key in it, a reply is
returned as the very same object.
"""
from __future__ import annotations

import os
import re

MARKER = "[redacted]"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)
MIN_CHARS = 8


def known_keys(api_key_env: str | None = None, environ=None) -> list[str]:
    """The key values to scrub, longest first (a key that contains another is replaced whole)."""
    environ = os.environ if environ is None else environ
    values = {environ[n] for n in environ if SECRET_NAME.search(n) and len(environ[n]) >= MIN_CHARS}
    named = environ.get(api_key_env) if api_key_env else None
    if named and len(named) > 4:  # the backbone's own key counts from 5 characters
        values.add(named)
    return sorted(values, key=lambda v: (-len(v), v))


def scrub(value, keys: list[str]):
    """``value`` with every key replaced by ``MARKER`` in every string (dict keys, lists and dicts included);
    the same object where no key occurs."""
    if not keys:
        return value
    if isinstance(value, str):
        if not any(k in value for k in keys):
            return value
        for k in keys:
            value = value.replace(k, MARKER)
        return value
    if isinstance(value, dict):
        items = [(scrub(k, keys), scrub(v, keys)) for k, v in value.items()]
        same = all(a is k and b is v for (a, b), (k, v) in zip(items, value.items()))
        return value if same else dict(items)
    if isinstance(value, (list, tuple)):
        items = [scrub(v, keys) for v in value]
        return value if all(a is v for a, v in zip(items, value)) else type(value)(items)
    return value
