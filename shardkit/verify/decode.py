"""The dataset's own tokenizer, loaded from the manifest's spec, to turn documents back into text.

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


def load_dataset_tokenizer(spec: dict[str, Any] | None) -> tuple[Tokenizer | None, list[str]]:
    """(tokenizer or None, notes saying why not or what is off)."""
    if spec is None:
        return None, ["no tokenizer recorded in the manifest: documents cannot be decoded"]
    kind, path = spec.get("kind"), spec.get("path")
    if kind == "bytes":
        return load_tokenizer("bytes"), []
    if kind not in _PREFIX or not isinstance(path, str) or not path:
        return None, [f"tokenizer kind {kind!r} with path {path!r} cannot be loaded: documents not decoded"]
    file = path.partition("?")[0] if kind == "tiktoken" else path
    if not os.path.isfile(file):
        return None, [f"tokenizer file {file} is not available here: documents not decoded"]
    notes = []
    sha = spec.get("sha256")
    if isinstance(sha, str) and sha and file_sha256(file) != sha:
        notes.append(f"tokenizer file {file} differs from the one used to pack (sha256 mismatch): "
                     "decoded text may be wrong")
    try:
        return load_tokenizer(_PREFIX[kind] + path, backend="hf", threads=0), notes
    except (ShardkitError, OSError, ValueError) as e:
        return None, [*notes, f"tokenizer {file} could not be loaded ({e}): documents not decoded"]


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
