"""The TW schedule-balance tool: the kernel's static schedule and the LPT bound on hand-counted item lists (CPU)."""

from __future__ import annotations

from bench.probes.tw_balance import balance_row, lpt_peak, static_schedule_peak


def test_static_schedule_alternates_direction_per_round() -> None:
    # Two CTAs; round 0 gives 9 to CTA 0 and 7 to CTA 1, round 1 runs backwards (5 to CTA 1, 3 to CTA 0), round 2
    # forwards again (1 to CTA 0): CTA 0 holds 9 + 3 + 1 = 13, CTA 1 holds 7 + 5 = 12.
    assert static_schedule_peak([9, 7, 5, 3, 1], 2) == 13
    assert static_schedule_peak([4], 3) == 4


def test_lpt_puts_each_item_on_the_least_loaded_sm() -> None:
    # 7 -> A, 5 -> B, 4 -> B (9), 3 -> A (10), 2 -> B (11).
    assert lpt_peak([7, 5, 4, 3, 2], 2) == 11
    # The static schedule can be worse than LPT: CTA 0 gets 7 + 3, CTA 1 gets 5 + 4, then CTA 0 gets 2 (12).
    assert static_schedule_peak([7, 5, 4, 3, 2], 2) == 12


def test_balance_row_of_a_benchmark_case() -> None:
    row = balance_row("bert_ffn_out", 0.75, 0, {("bert_ffn_out", 0.75): 0.5})
    assert row["items"] == row["tiles"] * 4096 // 128
    assert 0.0 < row["balance"] <= row["lpt_balance"] + 1e-9 <= 1.0 + 1e-9
    assert row["per_sm_speed"] == 0.5 / row["balance"]
