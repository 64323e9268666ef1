"""Fuzz targets and atheris harnesses for shardkit's parsers (see fuzz/README.md).

This package imports nothing on purpose: an atheris harness must import shardkit *inside*
`atheris.instrument_imports()` for coverage feedback, so nothing may import shardkit before it.
"""
