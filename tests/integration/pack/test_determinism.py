import json
import random

from support.dataset_bytes import assert_same_dataset

from shardkit.pack import PackConfig, pack
from shardkit.writer import ShardLimits


def _corpus(d, n_files=4, docs=400, seed=7):
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "δέλτα", "эпсилон", "zeta", "η", "θ", "\n", "  ", "🙂"]
    d.mkdir()
    for f in range(n_files):
        with open(d / f"part-{f}.jsonl", "w", encoding="utf-8") as fh:
            for _ in range(docs):
                if rng.random() < 0.02:
                    fh.write("{not json\n")  # bad records are part of the deterministic output (skip stats)
                    continue
                text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 200)))
                fh.write(json.dumps({"text": text}) + "\n")
    return d


def test_identical_bytes_for_any_worker_count(tmp_path):
    src = _corpus(tmp_path / "in")
    outs = []
    for w in (1, 2, 4):
        out = tmp_path / f"ds{w}"
        pack(PackConfig(inputs=(str(src),), output=str(out), workers=w, max_skip_fraction=1.0,
                        limits=ShardLimits(max_bytes=30_000, checksum_block_size=4096)))
        outs.append(out)
    for other in outs[1:]:
        assert_same_dataset(outs[0], other)
    manifest = json.loads((outs[0] / "manifest.json").read_text())
    assert manifest["stats"]["skipped"]["count"] > 0
    assert manifest["totals"]["shards"] > 10
