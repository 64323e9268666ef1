"""A tiny torch model on packed rows with document masking gives the loss of the documents fed one by one."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from shardkit.engine.fields import BatchFields  # noqa: E402
from shardkit.engine.packed_fields import block_mask, packed_fields  # noqa: E402
from shardkit.engine.packing import PackSpec, build_table, fill_rows  # noqa: E402

VOCAB, DIM, L = 97, 32, 31


class TinyLM(torch.nn.Module):
    """Embeddings with learned positions, one attention layer, a head: enough for attention to leak."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.tok = torch.nn.Parameter(torch.randn(VOCAB, DIM, generator=g))
        self.pos = torch.nn.Parameter(torch.randn(L + 1, DIM, generator=g))
        self.qkv = torch.nn.Parameter(torch.randn(DIM, 3 * DIM, generator=g) / DIM ** 0.5)
        self.head = torch.nn.Parameter(torch.randn(DIM, VOCAB, generator=g) / DIM ** 0.5)

    def forward(self, ids, positions, mask):
        x = self.tok[ids] + self.pos[positions]
        q, k, v = (x @ self.qkv).chunk(3, dim=-1)
        y = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], attn_mask=mask)[:, 0]
        return (x + y) @ self.head


def _corpus(seed: int):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, L + 2, size=40)  # every document fits a row: fed alone it is one sequence
    flat = rng.integers(0, VOCAB, size=int(lengths.sum()))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return flat, starts, lengths


def _packed_loss(model, flat, starts, lengths, *, leak: bool):
    table = build_table(starts, lengths, PackSpec(strategy="best_fit", seq_len=L))
    rows = np.arange(table.num_rows)
    tokens = torch.from_numpy(fill_rows(flat, table, rows)).long()
    idx, counts, _, plen = table.pieces(rows)
    f = packed_fields(plen, counts, table.first[idx], L,
                      BatchFields(position_ids=True, cu_seqlens=True, loss_mask=True, mask_doc_boundary=True))
    mask = torch.from_numpy(block_mask(f["cu_seqlens"], L))
    if leak:  # plain causal attention over the whole row: documents see each other
        mask = torch.ones(L, L, dtype=torch.bool).tril()[None, None].expand_as(mask)
    logits = model(tokens[:, :-1], torch.from_numpy(f["position_ids"]), mask)
    ce = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1), reduction="none")
    w = torch.from_numpy(f["loss_mask"]).reshape(-1)
    return (ce * w).sum() / w.sum(), table.num_rows


def _one_by_one_loss(model, flat, starts, lengths):
    total, count = 0.0, 0
    for s, n in zip(starts.tolist(), lengths.tolist()):
        doc = torch.from_numpy(flat[s:s + n]).long()[None]
        causal = torch.ones(n - 1, n - 1, dtype=torch.bool).tril()[None, None]
        logits = model(doc[:, :-1], torch.arange(n - 1)[None], causal)
        total = total + F.cross_entropy(logits[0], doc[0, 1:], reduction="sum")
        count += n - 1
    return total / count


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_packed_rows_with_document_masking_match_documents_one_by_one(seed):
    flat, starts, lengths = _corpus(seed)
    model = TinyLM()
    packed, rows = _packed_loss(model, flat, starts, lengths, leak=False)
    alone = _one_by_one_loss(model, flat, starts, lengths)
    assert rows < len(lengths)  # rows really hold several documents
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    # gradients too: training on packed rows is training on the documents
    g_packed = torch.autograd.grad(packed, list(model.parameters()))
    g_alone = torch.autograd.grad(_one_by_one_loss(model, flat, starts, lengths), list(model.parameters()))
    for a, b in zip(g_packed, g_alone):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # and the comparison is sharp: attention leaking across documents changes the loss
    leaked, _ = _packed_loss(model, flat, starts, lengths, leak=True)
    assert abs(leaked.item() - alone.item()) > 1e-3
