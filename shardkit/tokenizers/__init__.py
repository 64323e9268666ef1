"""Stage 3: tokenizers chosen by a spec string, batch-encoding texts to flat NumPy id arrays."""

from .base import Tokenizer, TokenizerSpec
from .bytes_tokenizer import BytesTokenizer
from .fastpath import FastPathRefused, TiktokenTokenizer, compile_tiktoken
from .hf import HFTokenizer
from .selfcheck import compare
from .spec import load_tokenizer, load_tokenizer_checked, parse_spec

__all__ = [
    "BytesTokenizer",
    "FastPathRefused",
    "HFTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerSpec",
    "compare",
    "compile_tiktoken",
    "load_tokenizer",
    "load_tokenizer_checked",
    "parse_spec",
]
