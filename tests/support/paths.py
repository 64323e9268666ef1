from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
GPT2_JSON = SHARED_DATA / "tokenizers" / "gpt2" / "tokenizer.json"
CORPUS = SHARED_DATA / "corpus"
