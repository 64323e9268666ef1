"""GPT-2 byte-level conventions shared by the fast path and the tiktoken-file loader.

Byte-level BPE vocabularies store each byte as a printable character (GPT-2's `bytes_to_unicode`);
tiktoken wants raw bytes. The split regexes here are tiktoken's own, faster but equivalent forms.
"""

from __future__ import annotations

__all__ = ["GPT2_PATTERN", "BYTE_DECODER", "token_bytes", "regex_problem"]

# tiktoken's r50k pattern: the same pieces as GPT-2's `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
# ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` (the regex of HF's ByteLevel pre-tokenizer), written to match faster.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def _bytes_to_unicode() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


BYTE_DECODER: dict[str, int] = {c: b for b, c in _bytes_to_unicode().items()}


def token_bytes(token: str) -> bytes | None:
    """The raw bytes a byte-level vocabulary entry stands for, or None if it is not byte-level text."""
    try:
        return bytes(BYTE_DECODER[c] for c in token)
    except KeyError:
        return None


# Escapes whose meaning is the same in Oniguruma (what `tokenizers` runs) and in Rust's fancy-regex
# (what tiktoken runs). Anything else — \d, \w, \b, \h, \R, \X, \G, anchors — differs in at least one
# corner (ASCII vs Unicode classes, line vs text anchors) and is refused rather than guessed.
_SAME_ESCAPES = set("sSpPrntfv") | {"x", "u"}


def regex_problem(pattern: str) -> str | None:
    """Why `pattern` may split differently under tiktoken than under `tokenizers`, or None."""
    in_class = 0
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1] if i + 1 < len(pattern) else ""
            if nxt.isalnum() and nxt not in _SAME_ESCAPES:
                return f"the split regex uses \\{nxt}, which Oniguruma and Rust regex interpret differently"
            i += 2
            continue
        if c == "[":
            in_class += 1
        elif c == "]" and in_class:
            in_class -= 1
        elif not in_class and c in "^$":
            return f"the split regex uses the anchor {c!r} (line anchor in Oniguruma, text anchor in Rust regex)"
        i += 1
    return None
