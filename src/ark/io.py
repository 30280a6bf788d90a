"""Small file helpers shared by the stages: atomic writes, JSON Lines, hashes, provenance."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

from ark.errors import UserError

PACKAGES = ("ark", "numpy", "scipy", "pandas", "pyarrow", "bm25s", "hydra-core", "omegaconf", "dvc",
            "litellm", "wandb", "torch", "transformers", "peft", "trl", "accelerate")


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:  # a full disk, a kill: no half-written temporary file is left beside it
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(target: str | Path):
    """Yield a sibling temporary directory to fill; it replaces ``target`` only if the block succeeds."""
    target = Path(target)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def blocking_file(directory: str | Path) -> Path | None:
    """The existing file (not a directory) at ``directory`` or above it that stops it being made, or None: checked
    before a run writes anything, where the directory is made only later."""
    for p in (Path(directory), *Path(directory).parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def write_json(path: str | Path, obj) -> None:
    write_text_atomic(path, json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=False) + "\n")


def write_jsonl(path: str | Path, rows) -> int:
    """Write rows as JSON Lines atomically (temp file + rename); returns the row count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
        os.replace(tmp, path)
    except BaseException:  # a full disk, a kill: no half-written temporary file is left beside it
        tmp.unlink(missing_ok=True)
        raise
    return n


MAX_JSON_BYTES = 256 << 20  # a results or config file; larger is not one of ours
JSON_DEPTH = sys.getrecursionlimit()  # Python's JSON parser recurses once per level: about 1,000 levels


def loads(text: str | bytes, where: str):
    """``json.loads`` for every file a stage reads (query rows, phenopackets, records, cached replies): a value
    nested past what the parser can read is one ``UserError`` naming ``where`` (a file and line), not a
    ``RecursionError`` traceback. Invalid JSON raises ``json.JSONDecodeError`` for the caller to word."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UserError(f"{where}: nested deeper than the JSON reader's limit (about {JSON_DEPTH:,} levels)") from None


def read_json(path: str | Path, what: str, max_bytes: int = MAX_JSON_BYTES):
    """The JSON value in ``path``; a file that is missing, not a regular file, too large, not UTF-8 or not JSON, or
    nested too deep for Python's parser, is one ``UserError`` naming ``what`` it should be."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{what}: {path} does not exist")
    if not path.is_file():
        raise UserError(f"{what}: {path} is not a regular file")
    if path.stat().st_size > max_bytes:
        raise UserError(f"{what}: {path} has {path.stat().st_size:,} bytes, over {max_bytes:,}")
    try:
        return loads(path.read_text(encoding="utf-8"), f"{what}: {path}")
    except UnicodeDecodeError:
        raise UserError(f"{what}: {path} is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{what}: {path} is not valid JSON ({e.msg} at line {e.lineno})") from None


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path} does not exist")
    if not path.is_file():  # a directory; a FIFO or a device would block or never end
        raise UserError(f"{path} is not a regular file")
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(loads(line, f"{path}:{lineno}"))
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
    return rows


FULL_HASH_BYTES = 256 << 20  # larger files are checked on load at SAMPLE_BLOCKS MiB-blocks (MAG's text: ~2 s per GB)
SAMPLE_BLOCKS = 64  # evenly spaced, the first and the last included


def _sampled_digest(f, size: int) -> str:
    """SHA-256 of ``SAMPLE_BLOCKS`` one-MiB blocks of a file spread evenly from its start to its end."""
    h = hashlib.sha256()
    for i in range(SAMPLE_BLOCKS):
        f.seek((size - (1 << 20)) * i // (SAMPLE_BLOCKS - 1))
        h.update(f.read(1 << 20))
    return h.hexdigest()


def file_checksum(path: Path) -> dict:
    """Size and SHA-256 of a file, as a build records it; a file over ``FULL_HASH_BYTES`` also gets the SHA-256 of
    its sampled blocks, which is what a load checks (``verify_checksums``)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        found = {"bytes": size, "sha256": hashlib.file_digest(f, "sha256").hexdigest()}
        if size > FULL_HASH_BYTES:
            found["sha256_sampled"] = _sampled_digest(f, size)
    return found


def checksum_matches(path: Path, expected: dict) -> bool:
    """Whether a file still has the size and checksum its build recorded: the whole file up to ``FULL_HASH_BYTES``,
    its sampled blocks above (damage between them is not seen at load; the recorded ``sha256`` is the whole file's)."""
    size = path.stat().st_size
    if not isinstance(expected, dict) or expected.get("bytes") != size:
        return False
    with path.open("rb") as f:
        if size > FULL_HASH_BYTES and "sha256_sampled" in expected:
            return _sampled_digest(f, size) == expected["sha256_sampled"]
        return hashlib.file_digest(f, "sha256").hexdigest() == expected.get("sha256")


def checksums(directory: Path, leave_out: tuple[str, ...] = ()) -> dict[str, dict]:
    """{file name: its checksum} of the files of a built directory (what its build records beside them)."""
    return {p.name: file_checksum(p) for p in sorted(Path(directory).iterdir())
            if p.is_file() and p.name not in leave_out}


def verify_checksums(directory: Path, files, what: str, record: str, stage: str) -> None:
    """A built directory's files against the checksums its build recorded in ``record`` (``files``): one line naming
    the file that differs, and a directory whose record holds none is refused (built before files were checked, or
    its record was damaged)."""
    if not isinstance(files, dict) or not files:
        raise UserError(f"the {what} at {directory} has no file checksums in {record}: rebuild it ({stage})")
    for name, expected in files.items():
        path = Path(directory) / name
        if not path.is_file() or not checksum_matches(path, expected):
            raise UserError(f"damaged {what} file {path}: its size or checksum differs from {record}; rebuild it "
                            f"({stage})")


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_tree(directory: str | Path) -> str:
    """One sha256 over a directory: every file's relative path and content hash, in path order."""
    root = Path(directory)
    h = hashlib.sha256()
    for f in sorted(q for q in root.rglob("*") if q.is_file()):
        h.update(f"{f.relative_to(root).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


_CONTENT_HASHES: dict[tuple, str] = {}


def content_sha256(path: str | Path) -> str | None:
    """sha256 of a regular file, or of a directory (``sha256_tree``); None for anything else (absent, a FIFO).
    Remembered per process while no file's size or modification time changes (a run's identity and the report hash
    the same graph and index many times)."""
    p = Path(path)
    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.is_file())
    else:
        return None
    key = (str(p.resolve()), tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    if key not in _CONTENT_HASHES:
        _CONTENT_HASHES[key] = sha256_tree(p) if p.is_dir() else sha256_file(p)
    return _CONTENT_HASHES[key]


def hash_paths(paths) -> dict[str, str]:
    """sha256 of each file or directory (``sha256_tree``) that exists."""
    return {str(p): sha256_tree(p) if p.is_dir() else sha256_file(p) for p in map(Path, paths) if p.exists()}


def package_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions
