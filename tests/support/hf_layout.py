"""Hugging Face on-disk layouts built by hand (no `datasets` / `huggingface_hub` needed).

`save_to_disk_dir` writes what `datasets.Dataset.save_to_disk` writes: Arrow IPC *stream* files named
data-NNNNN-of-MMMMM.arrow, a state.json listing them in order, and dataset_info.json.
`hub_cache_tokenizer` lays a tokenizer.json out as huggingface_hub's cache does: the file in blobs/ under
its hash, a snapshot directory holding a symlink to it, and refs/main naming the snapshot.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc


def save_to_disk_dir(path: Path, table: pa.Table, shards: int = 2, batch_rows: int = 7) -> Path:
    path.mkdir(parents=True)
    n = table.num_rows
    names = []
    for k in range(shards):
        part = table.slice(k * n // shards, (k + 1) * n // shards - k * n // shards)
        name = f"data-{k:05d}-of-{shards:05d}.arrow"
        with ipc.new_stream(str(path / name), table.schema) as w:
            for batch in part.to_batches(max_chunksize=batch_rows):
                w.write_batch(batch)
        names.append(name)
    (path / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": n} for n in names], "_fingerprint": "0123456789abcdef",
        "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
        "_split": "train"}, indent=2))
    features = {f.name: {"dtype": "string" if pa.types.is_string(f.type) else "int64", "_type": "Value"}
                for f in table.schema}
    (path / "dataset_info.json").write_text(json.dumps({"citation": "", "description": "", "features": features,
                                                        "homepage": "", "license": ""}, indent=2))
    return path


def dataset_dict_dir(path: Path, splits: dict[str, pa.Table]) -> Path:
    path.mkdir(parents=True)
    for name, table in splits.items():
        save_to_disk_dir(path / name, table, shards=1)
    (path / "dataset_dict.json").write_text(json.dumps({"splits": list(splits)}))
    return path


def hub_cache_tokenizer(hub: Path, repo: str, tokenizer_json: Path, revision: str = "main",
                        commit: str = "6c0e6080953db56375760c0471a8c5f2929baf11") -> Path:
    """`hub` is $HF_HUB_CACHE (or $HF_HOME/hub); returns the snapshot's tokenizer.json path."""
    repo_dir = hub / ("models--" + repo.replace("/", "--"))
    data = tokenizer_json.read_bytes()
    blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tokenizer_json, blob)
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    link = snap / "tokenizer.json"
    os.symlink(os.path.relpath(blob, snap), link)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / revision).write_text(commit)
    return link
