"""Stage 1: expand input patterns, directories and URLs into an ordered list of input files."""

from .listing import (
    SUPPORTED_EXTENSIONS,
    Compression,
    InputFile,
    InputFormat,
    input_compression,
    input_format,
    list_inputs,
    list_inputs_with_report,
)

__all__ = [
    "Compression",
    "InputFile",
    "InputFormat",
    "SUPPORTED_EXTENSIONS",
    "input_compression",
    "input_format",
    "list_inputs",
    "list_inputs_with_report",
]
