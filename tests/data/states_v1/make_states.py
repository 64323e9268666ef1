# Run with the pre-engine release checked out at /tmp/old (git worktree add /tmp/old fff95c8):
#   python tests/data/states_v1/make_states.py /tmp/v1src tests/data/states_v1/states.json
"""Save loader states (format version 1) with the release before the one read engine, plus the digests of
the batches that release delivered after each state: the migration test resumes them with today's code."""
import json
import sys
from pathlib import Path

import numpy as np
import xxhash

sys.path.insert(0, "/tmp/old")
sys.path.insert(0, "/work/main/tests")
import shardkit  # noqa: E402 - after the path to the old release

assert shardkit.__file__.startswith("/tmp/old"), shardkit.__file__
from shardkit.batching import BatchFields  # noqa: E402 - after the path to the old release
from shardkit.mixture.loader import MixtureLoader  # noqa: E402 - after the path to the old release
from support.mixtures import make_sources  # noqa: E402 - after the path to the old release

from shardkit.loader import Loader  # noqa: E402 - after the path to the old release
from shardkit.order import Ramp  # noqa: E402 - after the path to the old release

root = Path(sys.argv[1])
out = Path(sys.argv[2])
make_sources(root)

def digest(items):
    """The same digest as tests/property/test_state_properties.py computes."""
    h = xxhash.xxh3_128()
    for it in items:
        h.update(np.int64(it["batch_index"]).tobytes())
        h.update(np.int64(it["micro_index"]).tobytes())
        h.update(np.ascontiguousarray(it["input_ids"]).tobytes())
        h.update(np.ascontiguousarray(it["labels"]).tobytes())
        if "position_ids" in it:
            h.update(it["position_ids"].tobytes())
        if "source" in it:
            h.update(np.asarray(it["source"]).tobytes())
    return h.hexdigest()

cases = []
single = [
    ("block-constant", dict(seq_len=16, seed=3, batch_schedule=8, shuffle="block")),
    ("full-ramp-micro", dict(seq_len=16, seed=9, batch_schedule=Ramp(start=4, increment=4, ramp_samples=64, final=16),
                             micro_batch_size=2, shuffle="full")),
    ("none-budget-fields", dict(seq_len=24, seed=1, batch_schedule=4, shuffle="none", max_epochs=2,
                                fields=BatchFields(position_ids=True))),
    ("block-geometry", dict(seq_len=8, seed=5, batch_schedule=16, shuffle="block", block_samples=32, group_blocks=2,
                            max_tokens=40_000)),
]
for name, kw in single:
    ld = Loader(root / "web", **kw)
    it = iter(ld)
    for _ in range(7):
        next(it)
    state = ld.state_dict()
    nxt = [next(it) for _ in range(6)]
    cases.append({"name": name, "kind": "loader", "args": {k: (v.to_json() if hasattr(v, "to_json") else v)
                                                             for k, v in kw.items()},
                  "state": state, "next_digest": digest(nxt), "items": 6})
recipe = {"seed": 5, "seq_len": 16, "phases": [
    {"name": "a", "tokens": 2000, "batch": 4, "mix": {"web": 0.5, "code": 0.5}},
    {"name": "b", "tokens": 40_000, "batch": 8, "seq_len": 32, "mix": {"web": 0.25, "code": 0.25, "math": 0.5}}],
    "sources": {n: {"path": n} for n in ("web", "code", "math")}}
for at in (3, 40):
    ml = MixtureLoader(recipe, base_dir=root)
    it = iter(ml)
    for _ in range(at):
        next(it)
    state = ml.state_dict()
    nxt = [next(it) for _ in range(6)]
    cases.append({"name": f"mixture-at-{at}", "kind": "mixture", "recipe": recipe, "state": state,
                  "next_digest": digest(nxt), "items": 6})
out.write_text(json.dumps({"written_by": "shardkit 0.1.0 at commit fff95c8 (state format version 1)",
                           "data": "tests/support/mixtures.make_sources", "cases": cases}, indent=1) + "\n")
print(len(cases), "cases")
