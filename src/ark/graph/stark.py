"""Load a STaRK semi-structured knowledge base (AMAZON, MAG, PRIME) into a `Graph` (DESIGN §4.1).

Reads the files of the Hugging Face dataset ``snap-stanford/stark`` (``skb/<name>/processed.zip``,
extracted) from a local directory, without the ``stark-qa`` package. Layout under ``root``::

    root/prime/processed/{node_info.pkl, node_types.pt, node_type_dict.pkl,
                          edge_index.pt, edge_types.pt, edge_type_dict.pkl}
    root/mag/processed/...                          (the two *_dict.pkl files are optional:
                                                     STaRK overrides them with fixed dicts)
    root/amazon/processed/cache/brand-category-color/...

``root`` may also be the SKB folder itself (the one holding ``processed/``).

Graph equality with STaRK. STaRK's ``SKB.__init__`` makes the graph undirected when its edge index is
not symmetric: it adds every reverse arc, merges repeated (u, v) arcs and gives a pair carrying several
relation types the mean of their type ids truncated to int (torch_geometric ``to_undirected(...,
reduce='mean')``). `merge_undirected` does the same with numpy. STaRK then holds both arcs (u, v) and
(v, u) of every pair; here each undirected pair is stored ONCE as an edge (u <= v, self loops kept
once) and `Graph`'s CSR over both directions lists v among u's neighbors and u among v's, which is
STaRK's adjacency. Only a self loop differs: the CSR lists it twice (as out- and in-entry), STaRK once.
When the input is already symmetric STaRK leaves it as is; here each distinct (pair, type) is kept once
(a pair may then carry several types, as in STaRK's per-type adjacency).

Nodes keep STaRK's ids (node ``v`` here is STaRK node ``v``, the ids used by the QA answer lists);
``key`` is that id as a string. Documents follow STaRK's ``get_doc_info`` templates (add_rel=False,
compact=False by default; ``relations=True`` appends STaRK's ``get_rel_info`` text for the node types
STaRK renders it for).
"""
from __future__ import annotations

import json
import pickle
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ark.errors import UserError
from ark.graph.graph import Graph
from ark.graph.stark_documents import (amazon_doc, amazon_relations, mag_doc, mag_relations, prime_doc,
                                       prime_relations)

STARK_REPO = "snap-stanford/stark"

NAMES = ("amazon", "mag", "prime")
# PRIME's node_type_dict.pkl and edge_type_dict.pkl
PRIME_NODE_TYPES = dict(enumerate([
    "disease", "gene/protein", "molecular_function", "drug", "pathway",
    "anatomy", "effect/phenotype", "biological_process", "cellular_component", "exposure",
]))
PRIME_EDGE_TYPES = dict(enumerate([
    "ppi", "carrier", "enzyme", "target", "transporter", "contraindication", "indication", "off-label use",
    "synergistic interaction", "associated with", "parent-child", "phenotype absent", "phenotype present",
    "side effect", "interacts with", "linked to", "expression present", "expression absent",
]))
CANDIDATE_TYPES = {
    "amazon": ["product"],
    "mag": ["paper"],
    "prime": list(PRIME_NODE_TYPES.values()),
}
# subfolder of the SKB folder that holds the six files
FILES_DIR = {"amazon": "processed/cache/brand-category-color", "mag": "processed", "prime": "processed"}
TENSOR_FILES = ("node_types.pt", "edge_index.pt", "edge_types.pt")
DICT_FILES = ("node_type_dict.pkl", "edge_type_dict.pkl")
# MagSKB replaces whatever dicts the files hold with these
MAG_NODE_TYPES = {0: "author", 1: "institution", 2: "field_of_study", 3: "paper"}
MAG_EDGE_TYPES = {
    0: "author___affiliated_with___institution",
    1: "paper___cites___paper",
    2: "paper___has_topic___field_of_study",
    3: "author___writes___paper",
}
# ---------------------------------------------------------------- files
def canonical_name(name: str) -> str:
    """'PRIME', 'primekg', 'stark_prime' -> 'prime' (likewise amazon, mag)."""
    key = name.lower().removeprefix("stark_").removeprefix("stark-")
    key = {"primekg": "prime"}.get(key, key)
    if key not in NAMES:
        raise UserError(f"unknown STaRK SKB {name!r}; valid: {', '.join(NAMES)}")
    return key


def skb_dir(name: str, root: str | Path) -> Path:
    """The folder holding ``processed/``: ``root/<name>``, or ``root`` itself if it holds ``processed/``."""
    name, root = canonical_name(name), Path(root)
    if not (root / name).exists() and (root / "processed").exists():
        return root
    return root / name


def files_dir(name: str, root: str | Path) -> Path:
    """The folder holding the six SKB files."""
    name = canonical_name(name)
    return skb_dir(name, root) / FILES_DIR[name]


def required_files(name: str) -> list[str]:
    name = canonical_name(name)
    files = ["node_info.pkl", *TENSOR_FILES]
    return files if name == "mag" else files + list(DICT_FILES)


def missing_files(name: str, root: str | Path) -> list[Path]:
    folder = files_dir(name, root)
    return [folder / f for f in required_files(name) if not (folder / f).exists()]


def ensure_stark_files(name: str, root: str | Path, revision: str | None = None, online: bool = False) -> Path:
    """Return the folder with the SKB files; download ``skb/<name>/processed.zip`` at ``revision`` (the commit
    ``stark_revision`` in conf/config.yaml pins) only if files are missing and ``online`` is true, else raise a
    ``UserError`` naming the missing file and how to get it."""
    from ark.fetch import download, hf_url

    name = canonical_name(name)
    missing = missing_files(name, root)
    target = skb_dir(name, root)
    url = hf_url(STARK_REPO, revision or "<stark_revision>", f"skb/{name}/processed.zip")
    if missing and online:
        if not revision:
            raise UserError(f"downloading STaRK {name.upper()} needs a pinned revision (stark_revision)")
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target, prefix=".fetch-") as tmp:
            zip_path = Path(tmp) / "processed.zip"
            download(url, zip_path)
            try:
                with zipfile.ZipFile(zip_path) as archive:
                    archive.extractall(target)
            except zipfile.BadZipFile as e:
                raise UserError(f"{url}: not a ZIP archive ({e}); truncated download?") from None
        missing = missing_files(name, root)
    if missing:
        raise UserError(
            f"STaRK {name.upper()} file {missing[0]} is missing"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            + f"; set dataset.online=true to download {url} and unzip it into {target}, or fetch it by hand: "
            f"huggingface-cli download {STARK_REPO} --repo-type dataset "
            f"--revision {revision or '<stark_revision in conf/config.yaml>'} --include skb/{name}/processed.zip "
            f"--local-dir STARK_HF && unzip STARK_HF/skb/{name}/processed.zip -d {target}"
        )
    return files_dir(name, root)


def _load_tensor(path: Path) -> np.ndarray:
    import torch

    try:
        tensor = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # not a plain tensor file; trust it as STaRK does
        tensor = torch.load(path, map_location="cpu", weights_only=False)
    return np.asarray(tensor.numpy() if hasattr(tensor, "numpy") else tensor)


def _load_pickle(path: Path):
    with open(path, "rb") as f:
        return pickle.load(f)


def read_stark_files(name: str, root: str | Path, online: bool = False) -> dict:
    """The six files as plain Python / numpy objects (int64 arrays; edge_index shape [2, E])."""
    name = canonical_name(name)
    folder = ensure_stark_files(name, root, online=online)
    data = {"node_info": _load_pickle(folder / "node_info.pkl")}
    for f in TENSOR_FILES:
        data[f.removesuffix(".pt")] = _load_tensor(folder / f).astype(np.int64)
    for f in DICT_FILES:
        data[f.removesuffix(".pkl")] = _load_pickle(folder / f) if (folder / f).exists() else None
    if name == "mag":
        data["node_type_dict"], data["edge_type_dict"] = dict(MAG_NODE_TYPES), dict(MAG_EDGE_TYPES)
    data["edge_index"] = data["edge_index"].reshape(2, -1)
    return data


# ---------------------------------------------------------------- undirected merge
def is_undirected(src, dst, num_nodes: int) -> bool:
    """True if the arcs (src, dst) equal their reverses as a multiset (torch_geometric's test)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    return bool(np.array_equal(np.sort(src * num_nodes + dst), np.sort(dst * num_nodes + src)))


def merge_undirected(src, dst, types, num_nodes: int):
    """STaRK's undirected merge, returning each undirected pair once.

    Returns (u, v, type, merged) with u <= v sorted by (u, v, type). If the arcs are not symmetric
    (merged=True), every pair {u, v} gets the mean of the type ids of all its arcs in either
    direction, counted with repeats, truncated to int. If they already are (merged=False), the arcs
    are kept: one edge per distinct (pair, type).
    """
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    types = np.asarray(types, np.int64)
    low, high = np.minimum(src, dst), np.maximum(src, dst)
    pair = low * num_nodes + high
    merged = not is_undirected(src, dst, num_nodes)
    if merged:
        pairs, inverse = np.unique(pair, return_inverse=True)
        counts = np.bincount(inverse, minlength=len(pairs))
        sums = np.bincount(inverse, weights=types, minlength=len(pairs)).round().astype(np.int64)
        pair_types = sums // counts  # type ids are >= 0, so floor == truncation
    else:
        num_types = int(types.max()) + 1 if len(types) else 1
        typed = np.unique(pair * num_types + types)
        pairs, pair_types = typed // num_types, typed % num_types
    return pairs // num_nodes, pairs % num_nodes, pair_types, merged


# ---------------------------------------------------------------- graph
def _json_default(value):
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _display_name(name: str, info: dict, node_type: str) -> str:
    if name == "prime":
        value = info.get("name")
    elif name == "mag":
        value = info.get("title") if node_type == "paper" else info.get("DisplayName")
    else:
        value = info.get("title") if node_type == "product" else info.get(f"{node_type}_name")
    return "" if value is None or str(value) in ("-1", "nan") else str(value)


def _own_fields(name: str, info: dict) -> dict:
    """The node's text fields kept in `Graph.fields` (AMAZON reviews/Q&A and MAG -1 values left out)."""
    if name == "amazon":
        return {k: v for k, v in info.items() if k not in ("review", "qa")}
    if name == "mag":
        return {k: v for k, v in info.items() if str(v) not in ("-1", "nan")}
    return info


def clean_info(info: dict) -> dict:
    """Drop values whose text is '' or 'nan', recursing into dicts (STaRK's clean_dict, run on PRIME)."""
    return {
        k: clean_info(v) if isinstance(v, dict) else v
        for k, v in info.items()
        if isinstance(v, dict) or str(v) not in ("", "nan")
    }


def _names_from_dict(type_dict: dict, count: int, what: str) -> list[str]:
    size = max([int(k) + 1 for k in type_dict] + [count])
    names = [f"{what}_{i}" for i in range(size)]
    for k, v in type_dict.items():
        names[int(k)] = str(v)
    return names


def load_stark_skb(
    name: str, root: str | Path, online: bool = False, relations: bool = False, dimensions: bool = True
) -> Graph:
    """Load STaRK SKB ``name`` (amazon, mag, prime) from ``root`` as a `Graph` with STaRK's node ids.

    ``relations=True`` appends STaRK's relation text to the documents (AMAZON products, MAG papers, all
    PRIME nodes); ``dimensions`` is passed to `amazon_doc`.
    """
    name = canonical_name(name)
    data = read_stark_files(name, root, online=online)
    node_types = data["node_types"]
    n = len(node_types)
    node_info = data["node_info"]
    try:
        infos = [node_info[i] for i in range(n)]
    except KeyError as missing:
        raise UserError(
            f"STaRK {name} node_info.pkl has no entry for node {missing} (expected 0..{n - 1})"
        ) from None
    if name == "prime":
        infos = [clean_info(info) for info in infos]
    type_names = _names_from_dict(data["node_type_dict"], int(node_types.max()) + 1 if n else 0, "node_type")
    edge_index, edge_types = data["edge_index"], data["edge_types"]
    relation_names = _names_from_dict(
        data["edge_type_dict"], int(edge_types.max()) + 1 if len(edge_types) else 0, "relation"
    )
    src, dst, rel, merged = merge_undirected(edge_index[0], edge_index[1], edge_types, n)

    keys, names, fields, docs = [], [], [], []
    for i, info in enumerate(infos):
        kind = type_names[node_types[i]]
        keys.append(str(i))
        names.append(_display_name(name, info, kind))
        fields.append(json.dumps(_own_fields(name, info), ensure_ascii=False, default=_json_default))
        if name == "prime":
            docs.append(prime_doc(info))
        elif name == "mag":
            docs.append(mag_doc(info, kind))
        else:
            docs.append(amazon_doc(info, kind, dimensions=dimensions))
    meta = {
        "dataset": f"stark_{name}",
        "source": f"{STARK_REPO} skb/{name}/processed.zip",
        "candidate_types": CANDIDATE_TYPES[name],
        "undirected_merge": "applied" if merged else "input already undirected",
        # arcs in STaRK's edge_index after its merge (the input as is when already undirected)
        "stark_num_arcs": int(2 * np.count_nonzero(src != dst) + np.count_nonzero(src == dst))
        if merged
        else int(edge_index.shape[1]),
        "doc_relations": relations,
    }
    graph = Graph.from_tables(type_names, relation_names, node_types, keys, names, fields, src, dst, rel,
                              doc=docs, meta=meta)
    if relations:
        render = {"prime": prime_relations, "mag": mag_relations, "amazon": amazon_relations}[name]
        rendered_types = {"prime": type_names, "mag": ["paper"], "amazon": ["product"]}[name]
        for v in np.flatnonzero(np.isin(graph.node_type, graph.type_ids(rendered_types))).tolist():
            graph.doc[v] = graph.doc[v] + render(graph, infos, v)
    return graph
