import json

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    """Tests never read or write the user's ~/.cache/shardkit (compiled fast-path encodings)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SHARDKIT_CACHE_DIR", str(tmp_path_factory.mktemp("shardkit-cache")))
    yield
    mp.undo()


@pytest.fixture()
def small_corpus(tmp_path):
    """A few inputs of different formats with known texts (and no bad records)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "corpus"
    d.mkdir()
    texts = [f"document {i}: " + "héllo wörld ✓ " * (i % 7 + 1) for i in range(300)]
    with open(d / "a.jsonl", "w", encoding="utf-8") as f:
        for t in texts[:150]:
            f.write(json.dumps({"text": t, "id": len(t)}) + "\n")
    pq.write_table(pa.table({"text": texts[150:290], "id": list(range(140))}), d / "b.parquet", row_group_size=32)
    for i, t in enumerate(texts[290:]):
        (d / f"c{i:02d}.txt").write_text(t, encoding="utf-8")
    return d, texts
