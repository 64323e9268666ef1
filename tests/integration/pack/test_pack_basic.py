import json

import numpy as np
import pytest

from shardkit import open_dataset
from shardkit.errors import PackError, ResumeError
from shardkit.pack import PackConfig, TokenizeOptions, pack
from shardkit.readers import ReaderConfig
from shardkit.writer import ShardLimits


def _config(inputs, out, **kw):
    kw.setdefault("limits", ShardLimits(max_bytes=2000, checksum_block_size=4096))
    kw.setdefault("workers", 1)
    return PackConfig(inputs=tuple(str(i) for i in inputs), output=str(out), **kw)


def test_pack_round_trip_every_format(small_corpus, tmp_path):
    d, texts = small_corpus
    r = pack(_config([d], tmp_path / "ds"))
    ds = open_dataset(tmp_path / "ds")
    assert ds.num_docs == len(texts)
    assert ds.fingerprint == r.fingerprint
    for i, t in enumerate(texts):  # directory order: a.jsonl, b.parquet, c00.txt … (sorted paths)
        doc = ds.doc(i)
        assert doc[-1] == 256  # bytes tokenizer EOS
        assert bytes(doc[:-1].astype(np.uint8)).decode() == t
    assert ds.num_shards > 5
    assert all(s.num_tokens * 2 <= 2000 or s.num_docs == 1 for s in ds)
    stats = ds.manifest.stats
    assert stats["docs"] == len(texts) and stats["skipped"]["count"] == 0
    assert sum(stats["doc_length_histogram"]["counts"]) == len(texts)
    assert ds.manifest.tokenizer["kind"] == "bytes"
    assert "backend" not in ds.manifest.tokenizer and ds.manifest.created["tokenizer_backend"] == "bytes"


def test_no_eos_and_bos(small_corpus, tmp_path):
    d, texts = small_corpus
    pack(_config([d / "a.jsonl"], tmp_path / "ds", tokenize=TokenizeOptions(append_eos=False, prepend_bos=True)))
    ds = open_dataset(tmp_path / "ds")
    doc = ds.doc(3)
    assert doc[0] == 257 and bytes(doc[1:].astype(np.uint8)).decode() == texts[3]
    assert ds.manifest.eos_appended is False and ds.manifest.bos_prepended is True


def test_token_shard_size_and_ids_sidecar(small_corpus, tmp_path):
    d, texts = small_corpus
    pack(_config([d / "a.jsonl"], tmp_path / "ds", reader=ReaderConfig(id_field="id"),
                 limits=ShardLimits(max_bytes=None, max_tokens=500, checksum_block_size=4096)))
    ds = open_dataset(tmp_path / "ds")
    ids = []
    for s in ds:
        assert s.num_tokens <= 500 or s.num_docs == 1
        ids += [json.loads(line) for line in (ds.path / f"{s.name}.ids.jsonl").read_text().splitlines()]
    assert ids == [str(len(t)) for t in texts[:150]]


def test_refuses_finished_output_unless_overwrite(small_corpus, tmp_path):
    d, _ = small_corpus
    pack(_config([d / "a.jsonl"], tmp_path / "ds"))
    with pytest.raises(PackError, match="already holds a finished dataset"):
        pack(_config([d / "a.jsonl"], tmp_path / "ds"))
    r = pack(_config([d / "b.parquet"], tmp_path / "ds", overwrite=True))
    assert open_dataset(tmp_path / "ds").num_docs == 140 and r.resumed_shards == 0


def test_refuses_foreign_directory(small_corpus, tmp_path):
    d, _ = small_corpus
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(PackError, match="not empty and not a shardkit output"):
        pack(_config([d / "a.jsonl"], tmp_path / "out"))


def test_unfinished_pack_of_other_job_is_refused(small_corpus, tmp_path):
    d, _ = small_corpus
    out = tmp_path / "ds"
    pack(_config([d / "a.jsonl"], out))
    (out / "manifest.json").unlink()  # simulate an unfinished pack: journal back, manifest gone
    from shardkit.writer import Journal
    from shardkit.writer.journal import JOURNAL_NAME
    j = Journal(out / JOURNAL_NAME, {"inputs": [], "tokenizer": {}, "options": {"on_error": "fail"}}, "other")
    j.start([])
    j.close()
    with pytest.raises(ResumeError, match="different job"):
        pack(_config([d / "a.jsonl"], out))


def test_empty_result_is_an_error(tmp_path):
    (tmp_path / "e.jsonl").write_text('{"text": ""}\n{"nope": 1}\n')
    with pytest.raises(PackError, match="no documents were packed"):
        pack(_config([tmp_path / "e.jsonl"], tmp_path / "ds"))
