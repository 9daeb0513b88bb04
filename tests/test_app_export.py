"""Export: records round-trip through CSV and Parquet; figures open as standalone HTML."""
import io
import json
import zipfile

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from app import export, figures
from test_app_support import synthetic_result


@pytest.fixture(scope="module")
def result():
    return synthetic_result(seed=4)


def test_parquet_round_trip_keeps_types(result):
    back = pl.read_parquet(io.BytesIO(export.frame_bytes(result.events, "parquet")))
    assert_frame_equal(back, result.events)


def test_csv_round_trip_keeps_values(result):
    back = pl.read_csv(io.BytesIO(export.frame_bytes(result.heads, "csv")), schema=result.heads.schema)
    assert_frame_equal(back, result.heads)


def test_unknown_format_is_refused(result):
    with pytest.raises(ValueError, match="unknown export format"):
        export.frame_bytes(result.heads, "xlsx")


def test_zip_holds_every_table_and_the_summary(result):
    with zipfile.ZipFile(io.BytesIO(export.records_zip(result, "parquet", result.document))) as archive:
        names = set(archive.namelist())
        assert names == {"events.parquet", "heads.parquet", "layers.parquet", "chunks.parquet", "timings.parquet",
                         "tokens.parquet", "summary.json", "document.txt"}
        assert json.loads(archive.read("summary.json"))["budget"] == result.summary["budget"]
        assert archive.read("document.txt").decode() == result.document
        assert_frame_equal(pl.read_parquet(io.BytesIO(archive.read("layers.parquet"))), result.layers)


def test_figure_html_is_standalone(result):
    html = export.figure_html(figures.layer_overview(result.events)).decode()
    assert "<html>" in html[:100] and "Plotly.newPlot" in html
    assert len(html) > 1_000_000 and '<script src="http' not in html, "plotly.js must be embedded to open offline"
    # with the run's words: under the figure's title and as the page's title, escaped
    named = export.figure_html(figures.layer_overview(result.events), "notes <draft>.md: score, ρ=0.29").decode()
    assert "<title>notes &lt;draft&gt;.md: score, ρ=0.29</title>" in named[:400]
    assert "notes &lt;draft&gt;.md: score, ρ=0.29" in named.split("<title>", 1)[1].split("</title>", 1)[1]
