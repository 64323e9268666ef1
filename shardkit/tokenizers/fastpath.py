"""Compile a byte-level BPE `tokenizer.json` to an in-memory tiktoken `Encoding`, or say why not.

tiktoken's BPE core encodes the same vocabulary several times faster than `tokenizers`. The compiled
encoding is used only when every stage of the file's pipeline has an exact counterpart:

- normalizer: none (or an empty Sequence), or NFC — run by `tokenizers`' own NFC code, so it is exact;
- pre-tokenizer: ByteLevel(add_prefix_space=false, use_regex=true) → the GPT-2 regex, or
  Sequence[Split(Regex, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)] → that regex,
  if it has no construct that Oniguruma and Rust regex read differently;
- model: BPE without dropout, byte fallback or subword prefix/suffix, with all 256 byte tokens;
- merges: ids of merge results never fall with merge order and exceed their parts' ids, so "lowest
  rank first" (tiktoken) picks the pair "earliest merge first" (`tokenizers`) picks (see
  `_check_merge_order` for ties);
- tiktoken looks every piece up whole before merging: with `ignore_merges` `tokenizers` does too;
  without it, every vocabulary token must be what the merges make of its bytes;
- non-special added tokens: no lstrip/rstrip/single_word, no overlap with special tokens.

Anything else raises FastPathRefused with the reason; callers fall back to `tokenizers`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken
from tokenizers.models import BPE
from tokenizers.normalizers import NFC

from ..errors import TokenizerError, brief
from ..format.dtypes import MAX_VOCAB_32
from . import compiled_cache
from .added_tokens import AddedTokenPlan, overlap
from .base import TokenizerSpec, file_sha256
from .bytelevel import GPT2_PATTERN, regex_problem, token_bytes
from .specials import BOS_CANDIDATES, EOS_CANDIDATES, pick_special
from .tiktoken_backend import TiktokenTokenizer

__all__ = ["FastPathRefused", "CompiledBPE", "compile_tiktoken", "fast_hf_tokenizer", "PROBE_TEXT"]

# Covers every character class the split regexes distinguish; an encode/decode round trip of it shows
# the regex leaves no text unmatched (tiktoken silently drops unmatched text, `tokenizers` keeps it).
PROBE_TEXT = ("Hello, World! It's 2024-06-01: 3.14159 — naïve café (ﬁ) \t tab\r\n\r\nCRLF  \n\n"
              "  x'S 'll’ e\u0301 \u00a0nbsp\u3000日本語 한국어 🙂👍🏽 \u200d\u2028\u0085 ١٢٣ Ⅻ ½ $€ \x00\x1f\x7f ")


class FastPathRefused(Exception):
    """The tokenizer.json is not exactly representable as a tiktoken Encoding (the message says why)."""


@dataclass(frozen=True, eq=False)
class CompiledBPE:
    encoding: Any  # tiktoken.Encoding
    vocab: dict[str, int]  # model vocabulary and added tokens, as `tokenizers.get_vocab(True)` gives
    plan: AddedTokenPlan | None  # None when plain tiktoken ordinary encoding is already exact


def _normalizer(spec: Any) -> Any:
    if spec is None or (spec.get("type") == "Sequence" and not spec.get("normalizers")):
        return None
    if spec.get("type") == "NFC":
        return NFC()
    raise FastPathRefused(f"normalizer {spec.get('type')!r} has no exact tiktoken equivalent")


def _pattern(pre: Any) -> str:
    if pre is None:
        raise FastPathRefused("no pre-tokenizer (not a byte-level BPE file)")
    kind = pre.get("type")
    if kind == "Sequence" and len(pre.get("pretokenizers") or []) == 1:
        return _pattern(pre["pretokenizers"][0])
    if kind == "ByteLevel":
        if pre.get("add_prefix_space"):
            raise FastPathRefused("ByteLevel add_prefix_space=true (a space is prepended to each text)")
        if not pre.get("use_regex", True):
            raise FastPathRefused("ByteLevel use_regex=false with no Split before it (no split regex)")
        return GPT2_PATTERN
    if kind == "Sequence":
        items = pre.get("pretokenizers") or []
        if len(items) == 2 and items[0].get("type") == "Split" and items[1].get("type") == "ByteLevel":
            split, byte_level = items
            if byte_level.get("add_prefix_space"):
                raise FastPathRefused("ByteLevel add_prefix_space=true (a space is prepended to each text)")
            if byte_level.get("use_regex", True):
                raise FastPathRefused("Split followed by ByteLevel use_regex=true splits twice")
            regex = (split.get("pattern") or {}).get("Regex")
            if regex is None:
                raise FastPathRefused("Split by a plain string, not a regex")
            if split.get("behavior") != "Isolated" or split.get("invert"):
                raise FastPathRefused(f"Split behavior {split.get('behavior')!r} (invert={split.get('invert')}) "
                                      "is not tiktoken's find-all")
            problem = regex_problem(regex)
            if problem:
                raise FastPathRefused(problem)
            return regex
        kinds = [i.get("type") for i in items]
        raise FastPathRefused(f"pre-tokenizer Sequence{kinds} has no exact tiktoken equivalent")
    raise FastPathRefused(f"pre-tokenizer {kind!r} has no exact tiktoken equivalent")


def _check_model(model: dict[str, Any]) -> None:
    if model.get("type") != "BPE":
        raise FastPathRefused(f"model type {model.get('type')!r} is not BPE")
    if model.get("dropout") not in (None, 0, 0.0):
        raise FastPathRefused(f"BPE dropout={model['dropout']} (random merges)")
    if model.get("byte_fallback"):
        raise FastPathRefused("BPE byte_fallback=true (a sentencepiece-style vocabulary)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise FastPathRefused(f"BPE {key}={model[key]!r}")


def _merge_pairs(merges: list[Any]) -> list[tuple[str, str]]:
    pairs = []
    for i, m in enumerate(merges):
        parts = m.split(" ") if isinstance(m, str) else list(m)
        if len(parts) != 2:
            raise FastPathRefused(f"merge {i} {m!r} is not a pair of byte-level tokens")
        pairs.append((parts[0], parts[1]))
    return pairs


def _check_merge_order(pairs: list[tuple[str, str]], vocab: dict[str, int], *, converted: bool) -> None:
    """Check that BPE by rank (tiktoken) picks the pair that BPE by merge priority (`tokenizers`) picks.

    Merge results must rise (or repeat: tiktoken-converted files list every split of a token) with the
    merge order and outrank their parts. For a repeated result, two merges that can overlap, (x, y) and
    (y, z), must come left one first: tiktoken breaks rank ties leftmost, `tokenizers` by merge order.
    `converted` files (ignore_merges=true: written from tiktoken ranks, e.g. Llama-3) are exempt from
    that last rule: there tiktoken is the original and the listed merges its approximation.
    """
    prev = -1
    by_result: dict[str, list[tuple[str, str]]] = {}
    for i, (a, b) in enumerate(pairs):
        rank = vocab.get(a + b)
        if rank is None or a not in vocab or b not in vocab:
            raise FastPathRefused(f"merge {i} ({a!r} + {b!r}) names a token missing from the vocabulary")
        if rank < prev or rank <= max(vocab[a], vocab[b]):
            raise FastPathRefused(f"merge {i} ({a!r} + {b!r} → id {rank}): token ids do not rise with merge order")
        if rank == prev and not converted:
            for x, y in by_result[a + b]:
                if b == x:  # (a, b) then (b, y) overlap with the later merge on the left
                    raise FastPathRefused(f"merges ({x!r} + {y!r}) and ({a!r} + {b!r}) of one token break rank "
                                          "ties differently in tiktoken")
        by_result.setdefault(a + b, []).append((a, b))
        prev = rank


def _unreachable(vocab: dict[str, int], pairs: list[tuple[str, str]]) -> list[str]:
    """Tokens that `tokenizers`' BPE (merges only) does not produce from their own bytes."""
    model = BPE(vocab=vocab, merges=pairs)  # no ignore_merges: the merges alone decide
    out = []
    for t, i in vocab.items():
        if len(t) > 1:
            try:
                ok = [x.id for x in model.tokenize(t)] == [i]
            except Exception:  # a character outside the byte alphabet
                ok = False
            if not ok:
                out.append(t)
    return out


def _added_tokens(added: list[dict[str, Any]], normalizer: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(raw-matched, normalized-matched) non-special added tokens; special ones are plain text."""
    special = [t["content"] for t in added if t.get("special")]
    raw: dict[str, int] = {}
    normalized: dict[str, int] = {}
    for t in added:
        content = t.get("content") or ""
        if t.get("special") or not content:
            continue
        if t.get("lstrip") or t.get("rstrip") or t.get("single_word"):
            raise FastPathRefused(f"added token {content!r} uses lstrip/rstrip/single_word")
        clash = next((s for s in special if overlap(s, content)), None)
        if clash is not None:
            raise FastPathRefused(f"added token {content!r} overlaps the special token {clash!r}")
        if t.get("normalized", True):  # matched after normalization, in a second pass even without one
            normalized[normalizer.normalize_str(content) if normalizer is not None else content] = int(t["id"])
        else:
            raw[content] = int(t["id"])
    return raw, normalized


def read_json(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TokenizerError(f"{path}: tokenizer file not found; give the path of a Hugging Face "
                             "tokenizer.json (or a model directory that contains one)") from None
    except (OSError, ValueError) as e:
        raise TokenizerError(f"{path}: not a readable tokenizer.json ({e}); check the file is complete") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json (no 'model' object)")
    _check_ids(doc, path)
    return doc


def _check_ids(doc: dict[str, Any], path: str) -> None:
    """Every id of model.vocab and added_tokens is an integer the token format can store (< 2**31)."""
    vocab = doc["model"].get("vocab")
    pairs = list(vocab.items()) if isinstance(vocab, dict) else []
    pairs += [(t.get("content"), t.get("id")) for t in doc.get("added_tokens") or [] if isinstance(t, dict)]
    for token, tid in pairs:
        if not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid < MAX_VOCAB_32:
            raise TokenizerError(f"{path}: token {brief(token)} has id {brief(tid)}; ids must be integers from 0 "
                                 f"to {MAX_VOCAB_32 - 1:,} (the 32-bit token format): the file is damaged or "
                                 "not a tokenizer.json")


def compile_tiktoken(path: str) -> CompiledBPE:
    """The exact tiktoken form of a tokenizer.json, or FastPathRefused saying which stage differs."""
    doc = read_json(path)
    normalizer = _normalizer(doc.get("normalizer"))
    pattern = _pattern(doc.get("pre_tokenizer"))
    model = doc["model"]
    _check_model(model)
    vocab: dict[str, int] = dict(model.get("vocab") or {})
    if len(set(vocab.values())) != len(vocab):
        raise FastPathRefused("two vocabulary entries share an id")
    added = [t for t in doc.get("added_tokens") or [] if isinstance(t, dict)]
    added_ids = {t["content"]: int(t["id"]) for t in added}
    for content, tid in added_ids.items():
        if content in vocab and vocab[content] != tid:
            raise FastPathRefused(f"added token {content!r} has id {tid} but the vocabulary says {vocab[content]}")
    raw, normalized = _added_tokens(added, normalizer)

    pairs = _merge_pairs(model.get("merges") or [])
    _check_merge_order(pairs, vocab, converted=bool(model.get("ignore_merges")))
    # tiktoken looks a whole piece up before merging; `tokenizers` does so only with ignore_merges, so
    # without it every token must be what the merges make of its bytes (GPT-2: all but <|endoftext|>)
    unreachable = set() if model.get("ignore_merges") else set(_unreachable(vocab, pairs))
    ordinary = sorted(t for t in unreachable if t not in added_ids)
    if ordinary:
        raise FastPathRefused(f"{len(ordinary)} vocabulary tokens are not what the merges make of their bytes "
                              f"(e.g. {ordinary[:3]}) and ignore_merges is false")
    ranks: dict[bytes, int] = {}
    for tok, rank in vocab.items():
        if tok in unreachable:
            continue
        raw_bytes = token_bytes(tok)
        if raw_bytes is None:
            if tok in added_ids:
                continue  # an added token stored verbatim; decodable through special_tokens below
            raise FastPathRefused(f"vocabulary entry {tok!r} is not byte-level encoded")
        ranks[raw_bytes] = rank
    if len(ranks) != len(set(ranks.values())):
        raise FastPathRefused("two vocabulary entries stand for the same bytes")
    if any(bytes([b]) not in ranks for b in range(256)):
        raise FastPathRefused("the vocabulary lacks some of the 256 single-byte tokens")
    in_ranks = set(ranks.values())
    specials = {c: i for c, i in added_ids.items() if i not in in_ranks}  # only so decode knows them
    try:
        enc = tiktoken.Encoding(name=Path(path).name, pat_str=pattern, mergeable_ranks=ranks,
                                special_tokens=specials)
        roundtrip = enc.decode_bytes(enc.encode_ordinary(PROBE_TEXT)) == PROBE_TEXT.encode()
    except Exception as e:  # tiktoken raises ValueError or a pyo3 error for a regex it cannot compile
        raise FastPathRefused(f"tiktoken cannot use the split regex ({str(e)[:120]})") from None
    if not roundtrip:
        raise FastPathRefused("the split regex leaves some text unmatched (tiktoken would drop it)")
    plan = AddedTokenPlan(raw=raw, normalized=normalized,
                          normalize=normalizer.normalize_str if normalizer is not None else None)
    use_plan = bool(raw or normalized or normalizer is not None)
    return CompiledBPE(encoding=enc, vocab={**vocab, **added_ids}, plan=plan if use_plan else None)


def fast_hf_tokenizer(path: str, *, threads: int = 1, eos: str | None = None,
                      bos: str | None = None) -> TiktokenTokenizer:
    """A tokenizer.json encoded by tiktoken (spec kind "hf", backend "tiktoken"), or FastPathRefused.

    A file compiled before (same SHA-256) is loaded from the per-user cache (compiled_cache.py).
    """
    try:
        sha: str | None = file_sha256(path)
    except OSError:
        sha = None  # compile_tiktoken says what is wrong with the file
    cached = compiled_cache.load_entry(sha) if sha else None
    if cached is not None:
        compiled = CompiledBPE(encoding=cached[0], vocab=cached[1], plan=cached[2])
    else:
        compiled = compile_tiktoken(path)
        sha = sha or file_sha256(path)
        compiled_cache.store_entry(sha, compiled.encoding, compiled.vocab, compiled.plan)
    vocab = compiled.vocab
    spec = TokenizerSpec(kind="hf", name=Path(path).name, path=str(path), vocab_size=max(vocab.values()) + 1,
                         eos_id=pick_special(vocab, eos, EOS_CANDIDATES, what="eos", where=str(path)),
                         bos_id=pick_special(vocab, bos, BOS_CANDIDATES, what="bos", where=str(path)),
                         sha256=sha, backend="tiktoken")
    return TiktokenTokenizer(compiled.encoding, spec, plan=compiled.plan, threads=threads)
