"""benchmarks/launch_timeline.py's reading of a one-launch timeline (the recording runs on a GPU only)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import launch_timeline  # noqa: E402


def test_summary_splits_chains_and_outputs_and_finds_shared_multiprocessors(monkeypatch):
    # One batch row, two head pairs, four chunks; chain blocks of 64 columns of V = 128: 2 chain programs a head
    # pair. Head pair 0 commits in every chunk (a long chain when LONG_CHAIN <= 4), head pair 1 only in chunk 3.
    monkeypatch.setattr(launch_timeline, "LONG_CHAIN", 4)
    events = [[[True, True, True, True], [False, False, False, True]]]
    records = [
        [0, 4000, 7, 0], [0, 8000, 7, 0],        # head pair 0's two blocks, on one SM, overlapping
        [10, 20, 3, 0], [10, 30, 4, 0],          # head pair 1's blocks: one commit, short
    ]
    # Outputs by ticket: value blocks (2) fastest, then head pairs, then chunks.
    for c in range(4):
        for h in range(2):
            for _ in range(2):
                from_zero = h == 1 or c == 0     # head pair 1 never commits before chunk 3; chunk 0 starts from 0
                records.append([100, 100 + (1000 if from_zero else 3000), 5, 1])
    records.append([-1, -1, -1, -1])             # a row past the grid
    summary = launch_timeline.summarize(records, events, state_bv=64, value_dim=128, value_blocks=2)
    assert summary["programs"] == 4 + 16 and summary["chain_programs"] == 4
    assert [chain["commits"] for chain in summary["long_chains"]] == [4, 4]
    assert summary["long_chains_sharing_an_sm"] == 2
    # Beside the 8000 ns block: the 4000 ns one half its life; beside the 4000 ns block: the other all its life.
    assert [chain["neighbours"] for chain in summary["long_chains"]] == [1.0, 0.5]
    assert summary["long_chains"][1]["us_per_commit"] == 2.0          # 8000 ns over 4 commits
    assert summary["outputs_from_zero_state"]["programs"] == 2 * 2 + 4 * 2 - 2   # chunk 0 of both, head pair 1
    assert summary["outputs_with_state"]["programs"] == 6
    assert summary["outputs_with_state"]["median_us"] == 3.0
    assert summary["span_us"] == 8.0 and summary["last_chain_end_us"] == 8.0
    assert summary["outputs_ending_after_last_chain"] == 0
    assert summary["multiprocessors"] == 4
    # SM 5 ran all 16 outputs at once, so 4 SMs x 16 slots; the work is 4000 + 8000 + 10 + 20 ns of chains and
    # 10 x 1000 + 6 x 3000 ns of outputs.
    assert summary["programs_per_sm_at_once"] == 16
    assert summary["chain_work_per_slot_us"] == 12.03 / 64
    assert summary["output_work_per_slot_us"] == 28.0 / 64
    assert abs(summary["slot_fill"] - (12.03 + 28.0) / 64 / 8.0) < 1e-12


def test_programs_at_once_count_an_end_and_a_begin_at_one_instant_as_one():
    rows = [(0, [0, 10, 1, 0]), (1, [10, 20, 1, 1]), (2, [5, 15, 1, 1])]
    assert launch_timeline.most_at_once(rows) == 2
    assert launch_timeline.most_at_once(rows[:2]) == 1


def test_output_tickets_map_as_the_kernel_maps_them():
    places = launch_timeline.output_programs(12, batch=2, heads=3, n_chunks=2, value_blocks=1)
    assert places[:4] == [(0, 0, 0), (0, 1, 0), (0, 2, 0), (1, 0, 0)]
    assert places[6] == (0, 0, 1)
