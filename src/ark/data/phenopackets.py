"""Phenopacket queries: GA4GH phenopackets (JSON Lines, ``.json`` files, or a directory of them) rendered as
retrieval queries (DESIGN §5).

Each case becomes one query whose text is rendered deterministically from the HPO terms of the case
that are graph nodes, labelled with the graph's own names (notes/biokg-sources.md §4):

    "A female patient presents with <present labels>. Not observed: <first 10 excluded labels>.
     Which disease best explains these findings?"

Gold is the diagnosed disease node (``target="disease"``) or the gene/protein nodes named by the causal
gene symbols (``target="gene"``). Cases that cannot be used are counted by reason, never dropped
silently. Splits are PMID-disjoint: each PMID is hashed into train/val/test.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import gzip
import hashlib
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import ClassVar
from pathlib import Path

from ark.data import FILE, Dataset, QuerySet
from ark.fetch import download
from ark.io import loads
from ark.errors import UserError
from ark.data.queries import SPLITS, require_fractions, require_int, split_of

if TYPE_CHECKING:
    from ark.graph.graph import Graph

MAX_EXCLUDED = 10
PHENOTYPE = "effect/phenotype"  # the node type of the findings a case lists
QUESTIONS = {
    "disease": "Which disease best explains these findings?",
    "gene": "Which gene is most likely causal for these findings?",
}
SKIP_REASONS = (
    "duplicate_id",
    "no_disease",
    "disease_not_in_graph",
    "no_gene",
    "gene_not_in_graph",
    "no_present_terms",
    "no_present_terms_in_graph",
    "over_cap",
)
_GZIP_MAGIC = b"\x1f\x8b"
PACKET_FILES = (".json", ".jsonl", ".jsonl.gz")  # what is read of a directory of phenopackets


# ---------------------------------------------------------------- reading


def read_phenopackets(path_or_url: str | os.PathLike) -> Iterator[dict]:
    """Yield the phenopackets of a file (``_read_file``: JSON Lines, or one GA4GH phenopacket ``.json``; plain or
    gzipped) or of a directory of such files (``packet_files``), given a local path or an http(s) URL.

    Bad content raises ``UserError`` naming the file and line number.
    """
    source = str(path_or_url)
    if source.startswith(("http://", "https://")):
        with tempfile.TemporaryDirectory(prefix="phenopackets-") as tmp_dir:
            local = Path(tmp_dir) / "download"
            _download(source, local)
            yield from _read_file(local, source)
    elif Path(source).is_dir():
        for path in packet_files(source):
            yield from _read_file(path, str(path))
    else:
        yield from _read_file(Path(source), source)


def packet_files(directory: str | os.PathLike) -> list[Path]:
    """The phenopacket files of a directory (``PACKET_FILES``, not its subdirectories), in name order."""
    named = sorted(p for p in Path(directory).iterdir() if p.name.endswith(PACKET_FILES))
    files = [p for p in named if p.is_file()]
    unreadable = [p for p in named if not p.is_file() and not p.is_dir()]
    if unreadable:  # a broken or looping link, a FIFO: named as a case, never skipped unsaid
        raise UserError(f"{unreadable[0]}: not a readable file (a broken or looping link?); remove it or fix it")
    if not files:
        kinds = ", ".join("*" + suffix for suffix in PACKET_FILES)
        raise UserError(f"{directory}: a directory without phenopacket files ({kinds})")
    return files


def _read_file(path: Path, name: str) -> Iterator[dict]:
    """One packet per line (JSON Lines); a file whose first line is not a whole JSON value is one JSON document,
    one packet (a GA4GH ``.json`` file, pretty-printed)."""
    if not path.is_file():
        raise UserError(f"no phenopacket file at {name}")
    with path.open("rb") as f:
        is_gzip = f.read(2) == _GZIP_MAGIC
    opener = gzip.open if is_gzip else open
    line_no = packets = 0
    document = False
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    packet = loads(line, f"{name}, line {line_no}")
                except json.JSONDecodeError as e:
                    if packets == 0:  # not a packet a line: the whole file is one
                        document = True
                        break
                    raise UserError(
                        f"{name}, line {line_no}: not valid JSON ({e.msg} at column {e.colno}); truncated or malformed line?"
                    ) from None
                packets += 1
                yield _one_packet(packet, f"{name}, line {line_no}")
        if document:
            with opener(path, "rt", encoding="utf-8") as f:
                try:
                    packet = loads(f.read().rstrip(), name)  # rstrip: a cut file's error on its last line, not after
                except json.JSONDecodeError as e:
                    raise UserError(f"{name}, line {e.lineno}: not valid JSON ({e.msg} at column {e.colno}); "
                                    "truncated or malformed file?") from None
            packets = 1
            yield _one_packet(packet, name)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise UserError(f"{name}, after line {line_no}: damaged gzip stream ({e}); truncated download?") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{name}, after line {line_no}: not UTF-8 text ({e.reason}); damaged file?") from None
    if packets == 0:
        raise UserError(f"{name} holds no phenopacket (an empty file, or blank lines only)")


def _one_packet(packet, where: str) -> dict:
    if not isinstance(packet, dict):
        raise UserError(f"{where}: expected a JSON object (one phenopacket), got {type(packet).__name__}")
    return packet


# ---------------------------------------------------------------- fields of one phenopacket


def disease_ids(packet: dict) -> list[str]:
    """Diagnosed disease ids: ``interpretations[].diagnosis.disease.id``, else non-excluded ``diseases[].term.id``."""
    ids = [
        ((interp.get("diagnosis") or {}).get("disease") or {}).get("id")
        for interp in packet.get("interpretations") or []
    ]
    ids = [i for i in ids if i]
    if not ids:
        ids = [(d.get("term") or {}).get("id") for d in packet.get("diseases") or [] if not d.get("excluded")]
        ids = [i for i in ids if i]
    return list(dict.fromkeys(ids))


def gene_symbols(packet: dict) -> list[str]:
    """Causal gene symbols from the genomic interpretations (geneContext of a variant, or a gene descriptor)."""
    symbols = []
    for interp in packet.get("interpretations") or []:
        for gi in (interp.get("diagnosis") or {}).get("genomicInterpretations") or []:
            descriptor = (gi.get("variantInterpretation") or {}).get("variationDescriptor") or {}
            symbol = (descriptor.get("geneContext") or {}).get("symbol") or (gi.get("gene") or {}).get("symbol")
            if symbol:
                symbols.append(symbol)
    return list(dict.fromkeys(symbols))


def phenotype_ids(packet: dict) -> tuple[list[str], list[str]]:
    """(present, excluded) HPO term ids in file order, each listed once."""
    present, excluded = [], []
    for feature in packet.get("phenotypicFeatures") or []:
        term_id = (feature.get("type") or {}).get("id")
        if term_id:
            (excluded if feature.get("excluded") else present).append(term_id)
    return list(dict.fromkeys(present)), list(dict.fromkeys(excluded))


def pmid_of(packet: dict) -> str:
    """The first ``PMID:`` external reference, else the case id."""
    for ref in (packet.get("metaData") or {}).get("externalReferences") or []:
        ref_id = str(ref.get("id") or "")
        if ref_id.startswith("PMID:"):
            return ref_id
    return str(packet.get("id", ""))


def source_identity(path_or_url) -> dict:
    """Which phenopacket file (or directory): its name, and the sha256 of its content (decompressed) when it is
    local."""
    source = str(path_or_url)
    local = not source.startswith(("http://", "https://"))
    if local and not (Path(source).is_file() or Path(source).is_dir()):
        raise UserError(f"no phenopacket file at {source}")
    return {"file": Path(source).name, "sha256": content_sha256(source) if local else None}


def content_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's content, decompressed if it is gzipped (so that how it was compressed does not count); of
    a directory, over the names and contents of the files read of it (``packet_files``)."""
    if Path(path).is_dir():
        h = hashlib.sha256()
        for file in packet_files(path):
            h.update(f"{file.name}\0{content_sha256(file)}\n".encode())
        return h.hexdigest()
    with open(path, "rb") as f:
        is_gzip = f.read(2) == _GZIP_MAGIC
    h = hashlib.sha256()
    with (gzip.open if is_gzip else open)(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------- the public release -> JSON Lines


def fetch_release(source: dict, out_dir: str | os.PathLike, mirror: str | None = None) -> Path:
    """The configured phenopacket-store cases as one gzipped JSON Lines file ``out_dir/<source.file>``.

    ``source`` (conf/dataset/phenopacket_store.yaml): ``release`` {version, url, sha256 of the archive or null},
    ``cases`` (a file of case ids, or null for all), ``file`` and ``content_sha256`` (of the JSON Lines, checked).
    With ``mirror`` set, ``<mirror>/<source.mirror_path>/`` is read instead of the network: it holds the converted
    file itself or the release archive. A file already in place with the right content is kept.
    """
    target = Path(out_dir) / source["file"]
    if target.is_file() and content_sha256(target) == source["content_sha256"]:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    archive_name = source["release"]["url"].rsplit("/", 1)[-1]
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        staged = Path(tmp) / source["file"]
        if mirror:
            where = Path(mirror) / source["mirror_path"]
            if (where / source["file"]).is_file():
                shutil.copyfile(where / source["file"], staged)
            elif (where / archive_name).is_file():
                _check_archive(where / archive_name, source["release"])
                convert_release(where / archive_name, staged, _case_ids(source.get("cases")))
            else:
                raise UserError(f"the mirror {where} holds neither {source['file']} nor {archive_name} "
                                f"(mirror={mirror}, from ARK_MIRROR)")
        else:
            archive = Path(tmp) / archive_name
            _download(source["release"]["url"], archive)
            _check_archive(archive, source["release"])
            convert_release(archive, staged, _case_ids(source.get("cases")))
        digest = content_sha256(staged)
        if digest != source["content_sha256"]:
            raise UserError(f"{source['file']}: content sha256 {digest} != pinned {source['content_sha256']} "
                            "(another release, or another selection of cases?)")
        os.replace(staged, target)
    return target


def _download(url: str, to: Path) -> None:
    download(url, to, "; offline, set ARK_MIRROR (or mirror=) to a directory holding a copy")


def _check_archive(path: Path, release: dict) -> None:
    from ark.io import sha256_file

    if release.get("sha256") and sha256_file(path) != release["sha256"]:
        raise UserError(f"{path}: sha256 {sha256_file(path)} != pinned {release['sha256']} (release {release['version']})")


def _case_ids(path) -> list[str] | None:
    if not path:
        return None
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def convert_release(archive: str | os.PathLike, out: str | os.PathLike, case_ids: list[str] | None = None) -> int:
    """A phenopacket-store release archive (a ZIP of ``<tag>/<cohort>/<case>.json``) -> gzipped JSON Lines.

    One compact JSON object per line, as published; the cases ``case_ids`` lists, in its order (a case in
    two cohorts is taken once, from the first by path), or every case in path order. Returns the count.
    """
    packets: dict[str, str] = {}
    try:
        with zipfile.ZipFile(archive) as zf:
            for name in sorted(n for n in zf.namelist() if n.endswith(".json")):
                try:
                    packet = loads(zf.read(name), f"{archive}: {name}")
                except (json.JSONDecodeError, UnicodeDecodeError) as e:
                    raise UserError(f"{archive}: {name} is not a JSON phenopacket ({e})") from None
                if isinstance(packet, dict) and packet.get("id"):
                    packets.setdefault(str(packet["id"]), json.dumps(packet, ensure_ascii=False, separators=(",", ":")))
    except zipfile.BadZipFile as e:
        raise UserError(f"{archive}: not a ZIP archive ({e}); truncated download?") from None
    if case_ids is not None:
        missing = [i for i in case_ids if i not in packets]
        if missing:
            raise UserError(f"{archive}: {len(missing)} listed cases are not in the release (first: {missing[0]})")
        lines = [packets[i] for i in case_ids]
    else:
        lines = list(packets.values())
    with open(out, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        for line in lines:
            f.write(line.encode("utf-8") + b"\n")
    return len(lines)


def case_publications(packets, splits=None, split_fractions=(0.6, 0.2, 0.2)) -> set[str]:
    """Every ``PMID:`` a case of the source cites (all of its external references, not only the first); with
    ``splits``, only the cases of those query splits (a case's split: ``split_of`` its publication, as
    ``make_phenopacket_queries`` assigns it with the same ``split_fractions``)."""
    pmids = set()
    for n, packet in enumerate(packets, 1):
        with _structure(n, packet):
            if splits is not None and split_of(pmid_of(packet), split_fractions) not in splits:
                continue
            pmids |= {str(ref.get("id")) for ref in (packet.get("metaData") or {}).get("externalReferences") or []
                      if str(ref.get("id") or "").startswith("PMID:")}
    return pmids


@contextmanager
def _structure(n: int, packet: dict):
    """A field of the wrong JSON type (a string where a list of objects belongs) as one clear error."""
    try:
        yield
    except (AttributeError, TypeError) as e:
        raise UserError(f"phenopacket {n} (id {str(packet.get('id', ''))[:60]!r}): a field has the wrong type "
                        f"({e}); expected GA4GH phenopacket JSON") from None


def sex_of(packet: dict) -> str | None:
    sex = (packet.get("subject") or {}).get("sex")
    return {"FEMALE": "female", "MALE": "male"}.get(sex)


def excluded_publications(path, splits=None, split_fractions=(0.6, 0.2, 0.2)) -> tuple[set[str], dict]:
    """The publications a leave-publication-out graph leaves out (those of the cases of ``splits`` in the phenopacket
    file ``path``; every case where ``splits`` is None), and what it records of the cut: the file, its sha256, the
    splits and their fractions."""
    splits = None if splits is None else sorted(splits)
    fractions = [float(f) for f in split_fractions]
    pmids = case_publications(read_phenopackets(path), splits, fractions)
    return pmids, {**source_identity(path), "splits": splits, "split_fractions": fractions if splits else None}


# ---------------------------------------------------------------- queries


def render_query(present: list[str], excluded: list[str], sex: str | None, target: str = "disease") -> str:
    """The query text from present and excluded term labels (already restricted to graph nodes)."""
    who = f"A {sex} patient" if sex else "A patient"
    text = f"{who} presents with {', '.join(present)}."
    if excluded:
        text += f" Not observed: {', '.join(excluded[:MAX_EXCLUDED])}."
    return f"{text} {QUESTIONS[target]}"


def make_phenopacket_queries(
    graph: Graph,
    packets: Iterable[dict],
    target: str = "disease",
    cap_per_disease: int | None = 5,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
) -> tuple[dict[str, list[dict]], dict[str, int]]:
    """Turn phenopackets into queries over ``graph``.

    Returns ``({"train"|"val"|"test": [query, ...]}, counts)``; a query is
    ``{"id", "query", "answer_ids", "meta": {"pmid", "disease", "genes"}}``. ``counts`` has ``read``,
    ``kept`` and one entry per skip reason (``SKIP_REASONS``); ``read == kept + sum of the reasons``.
    The cap keeps, per disease, the first ``cap_per_disease`` usable cases in case-id order (None: no cap).
    """
    if target not in QUESTIONS:
        raise UserError(f"target must be one of {', '.join(QUESTIONS)}, got {target!r}")
    require_int("queries.cap_per_disease", cap_per_disease, least=1, optional=True)
    require_fractions("queries.split_fractions", split_fractions)
    node_of_key = {k: i for i, k in enumerate(graph.key.tolist())}
    genes_by_symbol = _genes_by_symbol(graph) if target == "gene" else {}
    counts = Counter({"read": 0, "kept": 0, **{r: 0 for r in SKIP_REASONS}})

    usable = {}  # case id -> query
    for packet in packets:
        counts["read"] += 1
        case_id = str(packet.get("id", ""))
        if not case_id:  # a query's id: GA4GH requires one
            raise UserError(f"phenopacket {counts['read']}: no 'id'; expected GA4GH phenopacket JSON")
        with _structure(counts["read"], packet):
            query, reason = _make_query(packet, graph, node_of_key, genes_by_symbol, target)
        if reason is None and case_id in usable:
            reason = "duplicate_id"
        if reason:
            counts[reason] += 1
        else:
            usable[case_id] = query

    splits = {s: [] for s in SPLITS}
    per_disease = defaultdict(int)
    for case_id in sorted(usable):
        query = usable[case_id]
        disease = query["meta"]["disease"]
        if cap_per_disease is not None and per_disease[disease] >= cap_per_disease:
            counts["over_cap"] += 1
            continue
        per_disease[disease] += 1
        splits[split_of(query["meta"]["pmid"], split_fractions)].append(query)
        counts["kept"] += 1
    if counts["kept"] == 0:
        skipped = ", ".join(f"{r} {counts[r]}" for r in SKIP_REASONS if counts[r])
        raise UserError(f"none of the {counts['read']} phenopackets makes a query on this graph ({skipped})")
    return splits, dict(counts)


def _make_query(packet, graph, node_of_key, genes_by_symbol, target) -> tuple[dict | None, str | None]:
    """One query, or (None, skip reason)."""
    diseases = disease_ids(packet)
    symbols = gene_symbols(packet)
    if target == "disease":
        if not diseases:
            return None, "no_disease"
        answer_ids = sorted({node_of_key[d] for d in diseases if d in node_of_key})
        if not answer_ids:
            return None, "disease_not_in_graph"
    else:
        if not symbols:
            return None, "no_gene"
        answer_ids = sorted({v for s in symbols for v in genes_by_symbol.get(s, ())})
        if not answer_ids:
            return None, "gene_not_in_graph"

    present, excluded = phenotype_ids(packet)
    if not present:
        return None, "no_present_terms"
    present_labels = [str(graph.name[node_of_key[t]]) for t in present if t in node_of_key]
    if not present_labels:
        return None, "no_present_terms_in_graph"
    excluded_labels = [str(graph.name[node_of_key[t]]) for t in excluded if t in node_of_key]

    query = {
        "id": str(packet.get("id", "")),
        "query": render_query(present_labels, excluded_labels, sex_of(packet), target),
        "answer_ids": answer_ids,
        "meta": {"pmid": pmid_of(packet), "disease": diseases[0] if diseases else None, "genes": symbols},
    }
    return query, None


def _genes_by_symbol(graph: Graph) -> dict[str, list[int]]:
    """Gene symbol (node name) -> gene/protein node ids."""
    if "gene/protein" not in graph.node_type_names:
        raise UserError(f"graph has no 'gene/protein' nodes (types: {', '.join(graph.node_type_names)})")
    gene_type = graph.node_type_names.index("gene/protein")
    by_symbol = defaultdict(list)
    for v in (graph.node_type == gene_type).nonzero()[0].tolist():
        by_symbol[str(graph.name[v])].append(v)
    return dict(by_symbol)


@dataclass(kw_only=True)
class PhenopacketStore(Dataset):
    """A release of phenopacket-store, converted to one JSON Lines file (``fetch_release``): cases, not a graph."""

    kind: ClassVar[str] = "phenopacket_store"

    release: dict
    file: str
    content_sha256: str
    cases: str | None = None
    mirror_path: str | None = None

    def download(self, mirror: str | None = None) -> dict[str, str]:
        return {self.name: str(fetch_release(asdict(self), self.raw_dir, mirror))}


@dataclass(kw_only=True)
class PhenopacketQueries(QuerySet):
    """Case reports as questions: phenotypes -> the case's disease or causal gene (``make_phenopacket_queries``)."""

    kind: ClassVar[str] = "phenopackets"

    source: str = field(metadata=FILE)
    target: str = "disease"
    cap_per_disease: int = 5
    split_fractions: list = field(default_factory=lambda: [0.6, 0.2, 0.2])

    def answerable(self, graph, answer_ids: list[int]) -> bool:
        """A case is answerable from its findings when its gold disease (for a gene: a disease of the gold gene)
        keeps at least one phenotype annotation in ``graph`` (a leave-publication-out graph may have removed all)."""
        def annotated(v: int) -> bool:
            return PHENOTYPE in {graph.type_name(int(u)) for u in graph.nbr[graph.neighbors(v)]}

        diseases = answer_ids if self.target == "disease" else [
            int(u) for v in answer_ids for u in graph.nbr[graph.neighbors(v)] if graph.type_name(int(u)) == "disease"]
        return any(annotated(v) for v in diseases)

    def make(self, dataset) -> tuple[dict[str, list[dict]], dict]:
        from ark.graph import load_graph

        splits, counts = make_phenopacket_queries(load_graph(dataset), read_phenopackets(self.source),
                                                  target=self.target, cap_per_disease=self.cap_per_disease,
                                                  split_fractions=tuple(self.split_fractions))
        return splits, {"cases": counts}
