"""Build-time checksums of graph and index files (ark.io): the whole file's SHA-256 always; above FULL_HASH_BYTES a
load checks sampled blocks, and the blind spot between them is what the docs say."""
import hashlib
import random

from ark import io


def test_a_large_file_records_its_whole_hash_and_a_load_checks_its_sampled_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "FULL_HASH_BYTES", 2 << 20)  # a small stand-in for 256 MiB
    path = tmp_path / "postings.bin"
    data = bytearray(random.Random(0).randbytes(9 << 20))
    path.write_bytes(data)
    recorded = io.file_checksum(path)
    assert recorded["sha256"] == hashlib.sha256(data).hexdigest() and "sha256_sampled" in recorded
    assert io.checksum_matches(path, recorded)
    block = (len(data) - (1 << 20)) * 5 // (io.SAMPLE_BLOCKS - 1)  # inside the sixth sampled block
    damaged = bytearray(data)
    damaged[block + 10] ^= 0xFF
    path.write_bytes(damaged)
    assert not io.checksum_matches(path, recorded)  # a sampled block: seen at load
    assert io.file_checksum(path)["sha256"] != recorded["sha256"]  # the whole-file hash sees any damage


def test_a_small_file_is_checked_whole(tmp_path):
    path = tmp_path / "graph.npy"
    path.write_bytes(b"abc" * 1000)
    recorded = io.file_checksum(path)
    assert set(recorded) == {"bytes", "sha256"} and io.checksum_matches(path, recorded)
    path.write_bytes(b"abd" + b"abc" * 999)
    assert not io.checksum_matches(path, recorded)
