"""The TW benchmark's masks: drawn per case, the same whichever cases run with them (CPU)."""

from __future__ import annotations

import torch

from bench.common import case_generator
from bench.tw_bench import bench_tw_mask


def test_case_generator_draws_depend_on_the_case_only() -> None:
    first = torch.rand(4, generator=case_generator(0, "bert_ffn_out", 128, 0.4))
    case_generator(0, "bert_qkv", 128, 0.4)  # another case drawn in between changes nothing
    again = torch.rand(4, generator=case_generator(0, "bert_ffn_out", 128, 0.4))
    other_sparsity = torch.rand(4, generator=case_generator(0, "bert_ffn_out", 128, 0.5))
    other_seed = torch.rand(4, generator=case_generator(1, "bert_ffn_out", 128, 0.4))
    assert torch.equal(first, again)
    assert not torch.equal(first, other_sparsity)
    assert not torch.equal(first, other_seed)


def test_bench_tw_mask_is_tile_wise_near_its_sparsity() -> None:
    k, n, g, sparsity = 512, 1024, 128, 0.75
    mask = bench_tw_mask(k, n, g, sparsity, case_generator(0, "unit", g, sparsity))
    assert abs(1.0 - mask.float().mean().item() - sparsity) < 0.02
    kept_cols = mask.any(dim=0).nonzero().flatten()
    kept_k = []
    for tile in kept_cols.split(g):
        rows = mask[:, tile]
        assert torch.equal(rows, rows[:, :1].expand_as(rows))  # each G kept columns share one kept-row set
        kept_k.append(int(rows[:, 0].sum()))
    assert len(set(kept_k)) > 1  # tiles differ in kept K, as global ranking leaves them
