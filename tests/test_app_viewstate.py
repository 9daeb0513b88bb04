"""The view state a link carries: round trip, forgiving parsing, fitting to a run."""
from app.viewstate import View, clamp, parse_view, view_to_params


def test_round_trip_through_query_parameters():
    view = View(run="0123456789abcdef01234567", layer=5, chunk=120, window_start=96, window_end=160, value="score",
                compare="fedcba9876543210fedcba98")
    params = view_to_params(view)
    assert params == {"run": view.run, "compare": view.compare, "layer": "5", "chunk": "120", "from": "96",
                      "to": "160", "value": "score"}
    assert parse_view(params) == view


def test_defaults_stay_out_of_the_link():
    assert view_to_params(View()) == {}
    assert view_to_params(View(example="quickstart")) == {"example": "quickstart"}


def test_malformed_values_are_dropped_not_fatal():
    view = parse_view({"run": "../../etc/passwd", "layer": "-3", "chunk": "x", "value": "<script>",
                       "example": "a/b", "from": "10", "to": "4"})
    assert view == View()


def test_compare_may_name_an_example():
    assert parse_view({"compare": "example:half"}).compare == "example:half"
    assert parse_view({"compare": "example:../x"}).compare is None


def test_lists_take_the_first_value():
    assert parse_view({"layer": ["2", "7"]}).layer == 2


def test_clamp_fits_the_view_to_a_run():
    view = View(layer=30, chunk=500, window_start=100, window_end=900)
    fitted = clamp(view, n_layers=4, n_chunks=300, layers=[0, 1, 2, 3])
    assert fitted.layer == 0 and fitted.chunk is None
    assert (fitted.window_start, fitted.window_end) == (100, 300)
    assert clamp(View(window_start=400, window_end=900), 4, 300).window_start is None
