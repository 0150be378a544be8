"""The artifact store: the same calls on a local path, a real S3-protocol server (moto's) and a GCS emulator
(fake-gcs-server), both over HTTP."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from tests.support.object_store import new_bucket_url
from tfdist.infra import storage
from tfdist.infra.jsonfiles import read_json, read_json_if_exists, sha256_file, write_json_atomic


@pytest.fixture(params=["local", *(pytest.param(s, marks=pytest.mark.e2e) for s in ("s3", "gs"))])  # servers: e2e
def root(request, tmp_path) -> str:
    if request.param == "local":
        return str(tmp_path / "artifacts")
    return new_bucket_url(request, request.param, "artifacts")


def test_records_are_read_back_and_listed_as_written(root):
    record = storage.join(root, "run", "train", "result.json")
    assert read_json_if_exists(record) is None and not storage.exists(record)
    write_json_atomic(record, {"step": 1})
    write_json_atomic(record, {"step": 2})
    assert read_json(record) == {"step": 2} and storage.exists(record)
    storage.write_bytes(storage.join(root, "run", "data", "a.bin"), b"\x00" * 3)
    assert storage.names(storage.join(root, "run")) == ["data", "train"]
    assert storage.names(storage.join(root, "nothing")) == []
    assert sha256_file(storage.join(root, "run", "data", "a.bin")) == (
        "709e80c88487a2411e1ee4dfb9f22a861492d20c4765150c0c794abd70f8147c"
    )
    storage.remove(record)
    storage.remove(record)
    assert storage.names(storage.join(root, "run", "train")) == []
    storage.remove_tree(storage.join(root, "run"))
    assert not storage.exists(storage.join(root, "run", "data", "a.bin"))


def test_files_are_deleted_together_those_missing_skipped(root):
    urls = [storage.join(root, "ckpt", f"ckpt-{k}.index") for k in range(3)]
    for url in urls:
        storage.write_bytes(url, b"x")
    storage.remove_all([*urls[:2], storage.join(root, "ckpt", "missing")])
    assert storage.names(storage.join(root, "ckpt")) == ["ckpt-2.index"]
    storage.remove_all(urls[:2])  # none of them there any more
    storage.remove_all([])
    assert storage.names(storage.join(root, "ckpt")) == ["ckpt-2.index"]


def test_a_full_disk_names_the_file_a_buffered_write_could_not_finish():
    with pytest.raises(OSError) as full:  # /dev/full: every write fails for want of space, at the buffer's flush
        with storage.naming("/dev/full"), open("/dev/full", "wb") as f:
            f.write(b"x")
    assert (full.value.errno, full.value.filename) == (errno.ENOSPC, "/dev/full")


def local_tree(tmp_path, files: int) -> str:
    tree = tmp_path / "tree"
    for k in range(files):
        (tree / f"part-{k % 3}").mkdir(parents=True, exist_ok=True)
        (tree / f"part-{k % 3}" / f"{k:03d}.bin").write_bytes(os.urandom(2048))
    (tree / "manifest.json").write_text("{}")
    return str(tree)


def test_a_tree_round_trips_through_the_store(root, tmp_path):
    tree = local_tree(tmp_path, 12)
    url = storage.join(root, "data")
    storage.upload_tree(tree, url, last=("manifest.json",))
    storage.download_tree(url, str(tmp_path / "back"))
    assert storage.files_under(str(tmp_path / "back")) == storage.files_under(tree)
    for name in storage.files_under(tree):
        assert (tmp_path / "back" / name).read_bytes() == (tmp_path / "tree" / name).read_bytes()


@pytest.mark.e2e
@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_a_reader_that_sees_the_marker_sees_the_whole_tree(scheme, request, tmp_path):
    tree = local_tree(tmp_path, 60)
    url = new_bucket_url(request, scheme, "data")
    snapshots: list[set[str]] = []
    done = threading.Event()

    def watch():
        fs, path = storage.filesystem(url)
        while not done.is_set():
            snapshots.append({os.path.relpath(p, path) for p in fs.find(path)})

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        storage.upload_tree(tree, url, last=("manifest.json",))
    finally:
        done.set()
        watcher.join()
    everything = set(storage.files_under(tree))
    assert any(0 < len(s) < len(everything) for s in snapshots), "the reader never saw the upload under way"
    assert all(s == everything for s in snapshots if "manifest.json" in s)


def test_a_staged_tree_is_published_whole_or_not_at_all(root, tmp_path):
    url = storage.join(root, "data")
    with pytest.raises(RuntimeError), storage.staged(url, last=("manifest.json",)) as tmp:
        open(os.path.join(tmp, "shard-0"), "wb").close()
        raise RuntimeError("the writer failed")
    assert not storage.exists(storage.join(url, "shard-0"))
    if storage.is_object_store(root):  # a crashed upload's objects, without the marker
        storage.write_bytes(storage.join(url, "shard-9"), b"left over")
    with storage.staged(url, last=("manifest.json",)) as tmp:
        open(os.path.join(tmp, "shard-0"), "wb").close()
        write_json_atomic(os.path.join(tmp, "manifest.json"), {"shards": 1})
    assert storage.names(url) == ["manifest.json", "shard-0"]
    with pytest.raises(FileExistsError if storage.is_object_store(root) else OSError):
        with storage.staged(url, last=("manifest.json",)) as tmp:
            write_json_atomic(os.path.join(tmp, "manifest.json"), {"shards": 2})
    assert read_json(storage.join(url, "manifest.json")) == {"shards": 1}


def test_only_the_first_of_writers_racing_to_create_an_object_makes_it(root):
    import concurrent.futures

    url = storage.join(root, "models", ".claim-7")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda k: storage.create(url, f"writer {k}".encode()), range(8)))
    assert made.count(True) == 1
    assert storage.read_bytes(url) == f"writer {made.index(True)}".encode()
    assert not storage.create(url, b"late")
