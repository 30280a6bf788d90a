"""The keys a run knows, and the one scrub that keeps them out of what it stores: every model reply
(``ark.llm.client``) and what W&B logs (``ark.tracking``).

A key is the value of the variable a backbone names (``api_key_env``) or of any environment variable whose name
says it holds a secret (KEY, TOKEN, SECRET, PASSW, CREDENTIAL); of the latter, values shorter than ``MIN_CHARS`` are
not keys (``1``, ``true``).
Some providers and proxies echo the key back (in an error body, or a model repeating its prompt): every string
of a reply is scrubbed before it is cached, returned to the agent or logged. With no key in it, a reply is
returned as the very same object.

A URL can carry a credential of its own (``https://user:secret@host/v1``, ``...?api_key=...``): ``scrub_urls``
replaces its user info and secret-looking query values wherever config is written (run identities, W&B's config,
Hydra's ``.hydra/*.yaml`` through ``ScrubHydraFiles``).
"""
from __future__ import annotations

import os
import re

MARKER = "[redacted]"
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)
MIN_CHARS = 8
URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]{0,30}://)(?P<userinfo>[^\s/@'\"]{1,512})@", re.IGNORECASE)
URL_SECRET_PARAM = re.compile(r"(?P<name>[?&](?:api[_-]?key|key|token|access_token|secret|password|sig|signature)=)"
                              r"(?P<value>[^&#\s'\"]{1,2048})", re.IGNORECASE)


def scrub_urls(text: str) -> str:
    """``text`` with every URL's user info and secret-looking query values replaced by ``MARKER`` (bounded
    patterns: linear in the text)."""
    if "://" not in text and "=" not in text:
        return text
    text = URL_USERINFO.sub(lambda m: f"{m['scheme']}{MARKER}@", text)
    return URL_SECRET_PARAM.sub(lambda m: f"{m['name']}{MARKER}", text)


def scrub_url_values(value):
    """Every string inside ``value`` (dicts and lists included) through ``scrub_urls``."""
    if isinstance(value, str):
        return scrub_urls(value)
    if isinstance(value, dict):
        return {scrub_url_values(k): scrub_url_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_url_values(v) for v in value)
    return value


class ScrubHydraFiles:
    """A Hydra callback (``hydra.callbacks`` in conf/config.yaml): after Hydra has written a job's
    ``.hydra/{config,hydra,overrides}.yaml`` (and a sweep's ``multirun.yaml``), rewrite them through ``scrub_urls``
    before the job runs."""

    def on_job_start(self, config, **kwargs) -> None:
        from pathlib import Path

        hydra = config.hydra
        files = []
        if hydra.output_subdir is not None:
            files += sorted((Path(hydra.runtime.output_dir) / hydra.output_subdir).glob("*.yaml"))
        if hydra.mode is not None and str(hydra.mode) == "RunMode.MULTIRUN":
            files.append(Path(hydra.sweep.dir) / "multirun.yaml")
        for path in files:
            if path.is_file():
                text = path.read_text(encoding="utf-8")
                clean = scrub_urls(text)
                if clean != text:
                    path.write_text(clean, encoding="utf-8")

    def _nothing(self, *args, **kwargs) -> None:
        pass

    on_run_start = on_run_end = on_multirun_start = on_multirun_end = on_job_end = on_compose_config = _nothing


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
