"""Fetching a pinned source file: from a local mirror (``mirror``, from ARK_MIRROR) or over HTTP(S), checked against
its sha256 before it is put in place.

A download asked for explicitly (``dataset.online=true``) is a plain HTTPS GET of the file's public URL, so the
offline default that ``import ark`` sets for the Hugging Face libraries (HF_HUB_OFFLINE=1, which huggingface_hub reads
once, at its import) does not apply to it. ``HF_ENDPOINT`` (as huggingface_hub reads it) replaces
https://huggingface.co, e.g. for a local copy of the Hub.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

from ark.errors import UserError
from ark.io import sha256_file

HF_DEFAULT_ENDPOINT = "https://huggingface.co"


def hf_url(repo: str, revision: str, path: str, repo_type: str = "dataset") -> str:
    """The URL of one file of a Hugging Face repository at a revision (the Hub's ``resolve`` route)."""
    endpoint = os.environ.get("HF_ENDPOINT", HF_DEFAULT_ENDPOINT).rstrip("/")
    prefix = {"dataset": "datasets/", "model": ""}[repo_type]
    return f"{endpoint}/{prefix}{repo}/resolve/{revision}/{path}"


def download(url: str, to: Path, hint: str = "; without network, set ARK_MIRROR to a directory holding a copy") -> None:
    """``url`` into the file ``to``; any network failure is one line naming the URL, then ``hint``."""
    from tqdm import tqdm

    print(f"downloading {url}", file=sys.stderr, flush=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(to, "wb") as out, \
                tqdm(total=int(response.headers.get("Content-Length") or 0) or None, unit="B", unit_scale=True,
                     unit_divisor=1024, desc=Path(to).name[:40], mininterval=1, file=sys.stderr) as bar:
            while chunk := response.read(1 << 20):  # the bytes so far, where a large file would be silent
                out.write(chunk)
                bar.update(len(chunk))
    except OSError as e:  # URLError, HTTPError, a timeout
        raise UserError(f"could not download {url} ({getattr(e, 'reason', e)}){hint} (docs/data.md)") from None


def fetch_pinned(target: str | os.PathLike, *, url: str, sha256: str | None, online: bool,
                 mirror: str | None = None, mirror_path: str | None = None, setting: str = "online=true") -> Path:
    """The file ``target``, fetched if it is absent or not the pinned version: from ``<mirror>/<mirror_path>`` when a
    mirror is set, else from ``url`` when ``online``, else a one-line error naming the file, its URL and the settings
    (``setting``: the config key that allows the download). ``sha256`` null: not pinned; a file in place is kept, a
    download is taken as it comes (its sha256 is what the caller records), a mirror's copy is refused (nothing to
    check it against)."""
    target = Path(target)
    here = sha256_file(target) if target.is_file() else None
    if here and (sha256 is None or here == sha256):
        return target
    where = f" under <mirror>/{mirror_path}" if mirror_path else ""
    if mirror:
        source = Path(mirror) / mirror_path if mirror_path else None
        if source is None or not source.is_file():
            raise UserError(f"the mirror has no {source or target.name} (mirror={mirror}, from ARK_MIRROR); "
                            f"unset ARK_MIRROR and set {setting} to download {url}")
        if sha256 is None:
            raise UserError(f"{source}: no sha256 is pinned for {url}, so a mirror's copy cannot be checked; unset "
                            f"ARK_MIRROR and set {setting} to download it")
        print(f"copying {source} (the mirror's copy of {url})", file=sys.stderr, flush=True)
        _put(target, lambda tmp: shutil.copyfile(source, tmp), sha256, str(source),
             f"the mirror holds another version of this file: unset ARK_MIRROR and set {setting} to download {url}")
    elif online:
        hint = f" into {target}; without network, set ARK_MIRROR to a directory holding a copy{where}"
        _put(target, lambda tmp: download(url, tmp, hint), sha256, url, "refused (a damaged download?)")
    else:
        state = "is missing" if here is None else f"has sha256 {here}, not the pinned {sha256}"
        raise UserError(f"{target} {state}; set {setting} to download it from {url}, or ARK_MIRROR to a directory "
                        f"holding a copy{where}")
    return target


def _put(target: Path, fetch, sha256: str | None, source: str, refusal: str) -> None:
    """Fetch into a temporary file beside ``target``, check it, then move it in place (no half-written target)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        staged = Path(tmp) / target.name
        fetch(staged)
        got = sha256_file(staged)
        if sha256 is not None and got != sha256:
            raise UserError(f"{source}: sha256 {got} is not the pinned {sha256}; {refusal}")
        os.replace(staged, target)
