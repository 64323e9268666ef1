"""Compare two dataset directories byte for byte (manifest minus its `created` block)."""

import json
from pathlib import Path


def dataset_files(path: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(path.iterdir()):
        if p.name == ".shardkit-lock":
            continue
        raw = p.read_bytes()
        if p.name == "manifest.json":
            doc = json.loads(raw)
            doc.pop("created")
            raw = json.dumps(doc, sort_keys=True).encode()
        out[p.name] = raw
    return out


def assert_same_dataset(a: Path, b: Path) -> None:
    fa, fb = dataset_files(a), dataset_files(b)
    assert sorted(fa) == sorted(fb), (sorted(set(fa) ^ set(fb)))
    different = [name for name in fa if fa[name] != fb[name]]
    assert not different, f"files differ: {different[:5]}"
