"""benchmarks/sm_ledger.py's reading of ncu's CSV (the profiling itself runs on a GPU only)."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import sm_ledger  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def rows(launch_id, kernel, duration_ns, active_cycles, clock_hz, sms=132):
    values = {"gpu__time_duration.sum": duration_ns, "sm__cycles_active.sum": active_cycles,
              "sm__cycles_elapsed.avg.per_second": clock_hz, "device__attribute_multiprocessor_count": sms}
    return [f'"{launch_id}","1","python","host","{kernel}","1","7","(128, 1, 1)","(4, 32, 1)","0","9.0",'
            f'"Command line profiler metrics","{name}","","{value:,}"' for name, value in values.items()]


def write(tmp_path, lines, name="sparsegdn.csv"):
    path = tmp_path / name
    path.write_text("\n".join(["==PROF== Connected to process 1", HEADER, *lines]) + "\n")
    return path


def test_the_ledger_sums_each_kernels_multiprocessor_time_and_packs_the_call(tmp_path):
    """Two launches of one kernel and one of another: SM-active ms is cycles over the clock, summed per kernel and
    sorted longest first; the packed time is the call's SM-active time over the multiprocessors."""
    clock = 1_500_000_000                      # 1.5 GHz: 1.5e6 cycles a millisecond
    path = write(tmp_path, rows(0, "intra_chunk_kernel", 200_000, 30_000_000, clock)
                 + rows(1, "state_pass_kernel", 2_000_000, 60_000_000, clock)
                 + rows(2, "intra_chunk_kernel", 100_000, 15_000_000, clock))
    table = sm_ledger.ledger(sm_ledger.read_csv(path))
    assert [k["kernel"] for k in table["kernels"]] == ["state_pass_kernel", "intra_chunk_kernel"]
    state, intra = table["kernels"]
    assert state["sm_active_ms"] == pytest.approx(40.0) and state["launches"] == 1
    assert intra["sm_active_ms"] == pytest.approx(30.0) and intra["launches"] == 2
    assert intra["duration_ms"] == pytest.approx(0.3)
    assert table["duration_ms"] == pytest.approx(2.3) and table["sm_active_ms"] == pytest.approx(70.0)
    assert table["multiprocessors"] == 132 and table["packed_ms"] == pytest.approx(70.0 / 132)
    assert "packed 0.530 ms" in sm_ledger.render("sparsegdn", table)


def test_a_csv_without_the_metrics_or_the_header_is_refused(tmp_path):
    partial = [line for line in rows(0, "k", 1, 2, 3) if "sm__cycles_active" not in line]
    with pytest.raises(ValueError, match="metrics missing"):
        sm_ledger.read_csv(write(tmp_path, partial))
    (tmp_path / "empty.csv").write_text("==ERROR== the application returned an error\n")
    with pytest.raises(ValueError, match="no ncu CSV header"):
        sm_ledger.read_csv(tmp_path / "empty.csv")


def test_the_ledger_command_reads_every_file_it_can_and_names_the_others(tmp_path, monkeypatch, capsys):
    good = write(tmp_path, rows(0, "chunk_kernel", 1_000_000, 3_000_000, 1_500_000_000), name="fla_32768.csv")
    bad = tmp_path / "flashqla_32768.csv"
    bad.write_text("==ERROR== timeout\n")
    out = tmp_path / "ledger.json"
    monkeypatch.setattr(sys, "argv", ["sm_ledger.py", "ledger", str(good), str(bad), "--json", str(out)])
    with pytest.raises(SystemExit, match="flashqla_32768.csv"):
        sm_ledger.main()
    assert "fla_32768: 1 kernels" in capsys.readouterr().out
    assert list(json.loads(out.read_text())) == ["fla_32768"]
