"""The phenopacket-store release -> the JSON Lines file the pipeline reads (stage download@phenopackets)."""
import gzip
import json
import zipfile

import pytest

from ark.data.phenopackets import content_sha256, convert_release, fetch_release, read_phenopackets
from ark.errors import UserError

CASES = {  # a tiny release in the archive's layout: <tag>/<cohort>/<case>.json, pretty-printed as published
    "0.1.24/GENEB/PMID_2_b.json": {"id": "PMID_2_b", "subject": {"sex": "MALE"}, "note": "Ünïcode"},
    "0.1.24/GENEA/PMID_1_a.json": {"id": "PMID_1_a", "subject": {"sex": "FEMALE"}},
    "0.1.24/GENEA/PMID_1_c.json": {"id": "PMID_1_c", "phenotypicFeatures": [{"type": {"id": "HP:1"}}]},
}


def _archive(path, cases=CASES):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("0.1.24/README.md", "not a phenopacket")
        for name, packet in cases.items():
            zf.writestr(name, json.dumps(packet, indent=2, ensure_ascii=False))
    return path


def _source(tmp_path, content_sha256, cases=None):
    return {"release": {"version": "0.1.24", "url": "http://127.0.0.1:9/all_phenopackets.zip", "sha256": None},
            "cases": cases, "file": "cases.jsonl.gz", "content_sha256": content_sha256, "mirror_path": "ppk"}


def test_convert_keeps_listed_cases_in_list_order_as_compact_lines(tmp_path):
    out = tmp_path / "out.jsonl.gz"
    assert convert_release(_archive(tmp_path / "a.zip"), out, ["PMID_2_b", "PMID_1_a"]) == 2
    lines = gzip.decompress(out.read_bytes()).decode().splitlines()
    assert lines == ['{"id":"PMID_2_b","subject":{"sex":"MALE"},"note":"Ünïcode"}',
                     '{"id":"PMID_1_a","subject":{"sex":"FEMALE"}}']
    assert [p["id"] for p in read_phenopackets(out)] == ["PMID_2_b", "PMID_1_a"]


def test_convert_without_a_list_takes_every_case_in_path_order_and_is_byte_stable(tmp_path):
    archive = _archive(tmp_path / "a.zip")
    convert_release(archive, tmp_path / "1.gz")
    convert_release(archive, tmp_path / "2.gz")
    assert [p["id"] for p in read_phenopackets(tmp_path / "1.gz")] == ["PMID_1_a", "PMID_1_c", "PMID_2_b"]
    assert (tmp_path / "1.gz").read_bytes() == (tmp_path / "2.gz").read_bytes()  # no timestamp inside


def test_a_listed_case_missing_from_the_release_is_an_error(tmp_path):
    with pytest.raises(UserError, match="1 listed cases are not in the release"):
        convert_release(_archive(tmp_path / "a.zip"), tmp_path / "o.gz", ["PMID_1_a", "PMID_9_z"])


def test_fetch_from_a_mirror_archive_checks_the_content(tmp_path):
    (tmp_path / "m/ppk").mkdir(parents=True)
    _archive(tmp_path / "m/ppk/all_phenopackets.zip")
    (tmp_path / "ids.txt").write_text("# a comment\nPMID_1_c\nPMID_1_a\n")
    convert_release(tmp_path / "m/ppk/all_phenopackets.zip", tmp_path / "expected.gz", ["PMID_1_c", "PMID_1_a"])
    digest = content_sha256(tmp_path / "expected.gz")

    got = fetch_release(_source(tmp_path, digest, str(tmp_path / "ids.txt")), tmp_path / "raw", str(tmp_path / "m"))
    assert got.read_bytes() == (tmp_path / "expected.gz").read_bytes()

    with pytest.raises(UserError, match="content sha256 .* != pinned"):
        fetch_release(_source(tmp_path, "0" * 64), tmp_path / "raw2", str(tmp_path / "m"))
    assert not (tmp_path / "raw2/cases.jsonl.gz").exists()  # nothing half-written


def test_fetch_from_a_mirror_copy_of_the_converted_file(tmp_path):
    (tmp_path / "m/ppk").mkdir(parents=True)
    convert_release(_archive(tmp_path / "a.zip"), tmp_path / "m/ppk/cases.jsonl.gz")
    digest = content_sha256(tmp_path / "m/ppk/cases.jsonl.gz")
    got = fetch_release(_source(tmp_path, digest), tmp_path / "raw", str(tmp_path / "m"))
    assert got.read_bytes() == (tmp_path / "m/ppk/cases.jsonl.gz").read_bytes()


def test_offline_without_a_mirror_names_the_url_and_the_setting(tmp_path):
    with pytest.raises(UserError) as e:
        fetch_release(_source(tmp_path, "0" * 64), tmp_path / "raw")
    message = str(e.value)
    assert "http://127.0.0.1:9/all_phenopackets.zip" in message and "ARK_MIRROR" in message
    assert "\n" not in message
    with pytest.raises(UserError, match="holds neither"):
        fetch_release(_source(tmp_path, "0" * 64), tmp_path / "raw", str(tmp_path / "empty"))


def test_content_hash_ignores_compression(tmp_path):
    (tmp_path / "plain.jsonl").write_bytes(b'{"id":"x"}\n')
    (tmp_path / "z.jsonl.gz").write_bytes(gzip.compress(b'{"id":"x"}\n', mtime=123))
    assert content_sha256(tmp_path / "plain.jsonl") == content_sha256(tmp_path / "z.jsonl.gz")
