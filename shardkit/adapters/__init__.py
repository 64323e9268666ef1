"""Stage 8: trainer adapters. NumPy needs none (a batch is a dict of arrays); torch is optional."""
