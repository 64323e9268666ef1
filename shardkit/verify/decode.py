"""The dataset's own tokenizer (given by the user, or recorded inside the dataset), to turn documents back into text.

Decoding is the one check a human can read: ids that pass every range check but come from another
tokenizer (or a misaligned shard) decode to visible nonsense. A tokenizer file that is absent here,
or differs from the one recorded at pack time (sha256), is a note, never a failure of the dataset.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import ShardkitError
from ..format.dataset import Dataset
from ..tokenizers import Tokenizer, load_tokenizer
from ..tokenizers.base import file_sha256
from .report import Check, Problem

__all__ = ["decode_samples", "load_dataset_tokenizer", "sample_doc_ids"]

_PREFIX = {"hf": "hf:", "tiktoken": "tiktoken:", "sentencepiece": "sentencepiece:"}
SAMPLE_TEXT_CHARS = 300


def load_dataset_tokenizer(spec: dict[str, Any] | None, directory: str | os.PathLike[str] | None = None, *,
                           tokenizer: str | None = None) -> tuple[Tokenizer | None, list[str]]:
    """(tokenizer or None, notes saying why not or what is off).

    `tokenizer` (the user's own spec, e.g. `--tokenizer PATH`) wins. Otherwise the manifest's recorded
    path is opened only when it lies inside the dataset `directory` (or a file of the same name sits in
    it): a manifest is data, and a path it names outside the dataset (`/etc/passwd`, a FIFO, a device)
    is never opened on its say-so.
    """
    if tokenizer is not None:
        return _load_given(spec, tokenizer)
    if spec is None:
        return None, ["no tokenizer recorded in the manifest: documents cannot be decoded"]
    kind, path = spec.get("kind"), spec.get("path")
    if kind == "bytes":
        return load_tokenizer("bytes"), []
    if kind not in _PREFIX or not isinstance(path, str) or not path:
        return None, [f"tokenizer kind {kind!r} with path {path!r} cannot be loaded: documents not decoded"]
    file, _, options = path.partition("?") if kind == "tiktoken" else (path, "", "")
    local = _inside(directory, file)
    if local is None:
        return None, [f"the manifest records tokenizer {file}, outside the dataset; shardkit does not open paths a "
                      f"manifest names outside the dataset: pass --tokenizer {file} (or copy the file into the "
                      "dataset directory) to decode documents"]
    path = local + (f"?{options}" if options else "")
    notes = []
    sha = spec.get("sha256")
    if isinstance(sha, str) and sha and file_sha256(local) != sha:
        notes.append(f"tokenizer file {local} differs from the one used to pack (sha256 mismatch): "
                     "decoded text may be wrong")
    try:
        return load_tokenizer(_PREFIX[kind] + path, backend="hf", threads=0), notes
    except (ShardkitError, OSError, ValueError) as e:
        return None, [*notes, f"tokenizer {local} could not be loaded ({e}): documents not decoded"]


def _inside(directory: str | os.PathLike[str] | None, file: str) -> str | None:
    """`file` (or the file of its name in `directory`) when it is a regular file inside `directory`."""
    if directory is None:
        return None
    root = os.path.realpath(directory)
    for candidate in (file, os.path.join(root, os.path.basename(file))):
        real = os.path.realpath(os.path.join(root, candidate))
        if os.path.commonpath([root, real]) == root and os.path.isfile(real):
            return real
    return None


def _load_given(spec: dict[str, Any] | None, given: str) -> tuple[Tokenizer | None, list[str]]:
    """The user's tokenizer; a note when its file is not the one recorded at pack time."""
    try:
        tok = load_tokenizer(given, backend="hf", threads=0)
    except (ShardkitError, OSError, ValueError) as e:
        return None, [f"tokenizer {given} could not be loaded ({e}): documents not decoded"]
    want = (spec or {}).get("sha256")
    got = tok.spec.sha256
    if isinstance(want, str) and want and got and got != want:
        return tok, [f"tokenizer {given} differs from the one used to pack (sha256 mismatch): decoded text may "
                     "be wrong"]
    return tok, []


def sample_doc_ids(num_docs: int, n: int) -> list[int]:
    """`n` document indices spread evenly over the dataset, first and last included (deterministic)."""
    if num_docs <= 0 or n <= 0:
        return []
    if n >= num_docs:
        return list(range(num_docs))
    return sorted({int(i) for i in np.linspace(0, num_docs - 1, n).round()})


def decode_samples(ds: Dataset, tokenizer: Tokenizer, doc_ids: list[int]) -> tuple[list[dict[str, Any]], list[Problem]]:
    samples, problems = [], []
    for i in doc_ids:
        shard, j = ds.locate_doc(i)
        ids = ds.doc(i)
        try:
            text = tokenizer.decode(ids)
        except Exception as e:  # noqa: BLE001 - third-party decoders raise anything (KeyError, OverflowError…)
            problems.append(Problem(Check.DECODE, f"document {i:,} (#{j:,} of the shard) does not decode "
                                                  f"({type(e).__name__}: {str(e)[:200]})",
                                    shard=shard.name, file=shard.entry.bin_name))
            continue
        samples.append({"doc": i, "shard": shard.name, "doc_in_shard": j, "tokens": int(ids.size),
                        "replacement_chars": text.count("\ufffd"), "text": text[:SAMPLE_TEXT_CHARS]})
    return samples, problems
