"""`--tokenizer gpt2`: a Hugging Face name resolved from the local HF cache (laid out here by hand, as
huggingface_hub lays it out), never downloaded; an offline-clear error when it is not cached."""

import pytest
from click.testing import CliRunner
from support.hf_layout import hub_cache_tokenizer
from support.paths import GPT2_JSON

from cli.main import cli
from shardkit import open_dataset
from shardkit.errors import TokenizerError
from shardkit.tokenizers import load_tokenizer
from shardkit.tokenizers.hub_cache import hub_cache_dir, resolve_hub_tokenizer

pytestmark = pytest.mark.skipif(not GPT2_JSON.exists(), reason="needs ../shared/data")


@pytest.fixture()
def clean_env(monkeypatch, tmp_path):
    for var in ("HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def test_cache_location_follows_huggingface_hub(clean_env, tmp_path):
    assert hub_cache_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    clean_env.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "hub2"))  # wins over HF_HOME, as in huggingface_hub
    assert hub_cache_dir() == tmp_path / "hub2"


def test_names_resolve_from_the_cache(clean_env, tmp_path):
    clean_env.setenv("HF_HOME", str(tmp_path / "hf"))
    link = hub_cache_tokenizer(tmp_path / "hf" / "hub", "gpt2", GPT2_JSON)
    assert resolve_hub_tokenizer("gpt2") == str(link)
    tok = load_tokenizer("gpt2")
    ids, _ = tok.encode_batch(["Hello world"])
    assert ids.tolist() == [15496, 995]
    org = hub_cache_tokenizer(tmp_path / "hf" / "hub", "openai-community/gpt2", GPT2_JSON, revision="v1",
                              commit="a" * 40)
    assert resolve_hub_tokenizer("openai-community/gpt2@v1") == str(org)
    assert resolve_hub_tokenizer("openai-community/gpt2@" + "a" * 40) == str(org)  # a commit hash
    assert resolve_hub_tokenizer("openai-community/gpt2") == str(org)  # no refs/main: the only snapshot


def test_not_cached_is_an_offline_clear_error(clean_env, tmp_path):
    clean_env.setenv("HF_HOME", str(tmp_path / "empty"))
    with pytest.raises(TokenizerError, match="never downloads") as e:
        load_tokenizer("meta-llama/Llama-3-8B")
    assert "hf download meta-llama/Llama-3-8B tokenizer.json" in str(e.value)
    assert str(tmp_path / "empty" / "hub") in str(e.value)
    hub_cache_tokenizer(tmp_path / "empty" / "hub", "gpt2", GPT2_JSON)
    with pytest.raises(TokenizerError, match="no snapshot for revision 'nope'"):
        load_tokenizer("gpt2@nope")


def test_pack_cli_with_a_cached_name_gives_the_paths_tokens(clean_env, tmp_path):
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    hub_cache_tokenizer(tmp_path / "hub", "gpt2", GPT2_JSON)
    (tmp_path / "a.jsonl").write_text('{"text": "Hello world"}\n{"text": "The quick brown fox."}\n')
    by_name = CliRunner().invoke(cli, ["pack", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "n"), "-t", "gpt2",
                                       "-q", "-w", "1"])
    by_path = CliRunner().invoke(cli, ["pack", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "p"), "-t",
                                       str(GPT2_JSON), "-q", "-w", "1"])
    assert by_name.exit_code == 0 and by_path.exit_code == 0, (by_name.output, by_path.output)
    a, b = open_dataset(tmp_path / "n"), open_dataset(tmp_path / "p")
    assert a.doc(0).tolist() == b.doc(0).tolist() == [15496, 995, 50256]
    clean_env.setenv("HF_HUB_CACHE", str(tmp_path / "nothing"))
    r = CliRunner().invoke(cli, ["pack", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "x"), "-t", "gpt2", "-q"])
    assert r.exit_code == 1 and "never downloads" in r.output and "Traceback" not in r.output
