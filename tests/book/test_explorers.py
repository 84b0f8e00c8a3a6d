"""course_book.explorers: charts whose controls filter precomputed states."""

from __future__ import annotations

import json
import math
import re

import pytest

from course_book.explorers import Control, bar_explorer, explorer_bundle, heatmap_explorer


def _records():
    return [{"head": h, "query": q, "key": k, "weight": (h + 1) * 0.1 + i * 0.01 + j * 0.001}
            for h in range(3) for i, q in enumerate("abc") for j, k in enumerate("abc")]


def _all_params(spec):
    return {p["name"]: p for p in spec.get("params", [])}


def _filters(spec):
    found = []
    def walk(node):
        if isinstance(node, dict):
            for t in node.get("transform", []):
                if "filter" in t:
                    found.append(t["filter"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec)
    return found


def test_heatmap_spec_binds_each_control_and_filters_on_it():
    chart = heatmap_explorer(_records(), x="key", y="query", value="weight", domain=(0, 1),
                             controls=[Control("head", options=[0, 1, 2], kind="select",
                                               option_labels=["h0", "h1", "h2"], value=1)],
                             captions=[{"head": h, "caption": f"head {h}"} for h in range(3)])
    spec = chart.to_dict()
    params = _all_params(spec)
    assert params["ctl_head"]["value"] == 1
    assert params["ctl_head"]["bind"]["input"] == "select"
    assert params["ctl_head"]["bind"]["options"] == [0, 1, 2]
    assert params["ctl_head"]["bind"]["labels"] == ["h0", "h1", "h2"]
    filters = _filters(spec)
    # the map (rect and text layers) and the caption line are all filtered by the head
    assert len(filters) >= 2 and all('datum["head"] == ctl_head' in f for f in filters)
    # every state's data is in the chart
    assert json.dumps(spec).count("head 1") == 1 and "head 2" in json.dumps(spec)


def test_slider_compares_with_a_tolerance_and_has_the_options_range():
    options = [e / 4 for e in range(-4, 5)]
    records = [{"t": e, "key": k, "p": 0.5 + e / 4} for e in options for k in "ab"]
    spec = bar_explorer(records, x="key", y="p", controls=[Control("t", options=options, value=0.0)]).to_dict()
    bind = _all_params(spec)["ctl_t"]["bind"]
    assert (bind["input"], bind["min"], bind["max"], bind["step"]) == ("range", -1.0, 1.0, 0.25)
    assert any(re.search(r'abs\(datum\["t"\] - ctl_t\) < 1e-9', f) for f in _filters(spec))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(field="n", options=[1, 2, 4]), "equal steps"),
        (dict(field="n", options=[]), "must not be empty"),
        (dict(field="n", options=[1, 2], kind="knob"), "kind must be one of"),
        (dict(field="n", options=[True, False], kind="checkbox"), r"\[False, True\]"),
        (dict(field="n", options=[1, 2], kind="select", option_labels=["a"]), "one label per option"),
        (dict(field="n", options=[1, 2], value=3), "one of its options"),
        (dict(field="n", options=["a", "b"]), "must be numbers"),
    ],
)
def test_control_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Control(**kwargs)


def test_records_must_hold_every_option_and_field():
    records = _records()
    with pytest.raises(ValueError, match="no record has head = 5"):
        heatmap_explorer(records, x="key", y="query", value="weight",
                         controls=[Control("head", options=[0, 5], kind="select")])
    with pytest.raises(ValueError, match=r"lack the field\(s\) \['score'\]"):
        heatmap_explorer(records, x="key", y="query", value="score",
                         controls=[Control("head", options=[0, 1], kind="select")])


def test_bundle_draws_from_the_page_and_fetches_nothing():
    chart = heatmap_explorer(_records(), x="key", y="query", value="weight",
                             controls=[Control("head", options=[0, 1, 2], kind="radio")])
    bundle = explorer_bundle(chart, 'weights of one <head> & "its" keys')
    assert bundle["application/vnd.vegalite.v5+json"]["$schema"].startswith("https://vega.github.io/schema/vega-lite/v5")
    from course_book import i18n

    assert "text/html" not in bundle, "JupyterLab ranks HTML above Vega-Lite: the book's HTML has its own type"
    html = bundle[i18n.BOOK_MIME_TYPE]["text/html"]
    assert 'class="course-explorer"' in html and "vegaEmbed(" in html
    # no script or stylesheet from elsewhere: the schema URL is data, not a request
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", html)
    assert 'aria-label="weights of one &lt;head&gt; &amp; &quot;its&quot; keys"' in html
    assert "</script" not in html.split("<script", 1)[1].split("</script>")[0]
    with pytest.raises(ValueError, match="description"):
        explorer_bundle(chart, " ")


def test_line_layers_filter_on_the_controls_their_records_carry():
    from course_book.explorers import line_explorer

    curves = [{"pair": p, "pos": x, "value": float(x * p), "curve": "sin"} for p in range(3) for x in range(5)]
    points = [{"pair": p, "pos": x, "value": float(x * p), "at": x} for p in range(3) for x in range(5)]
    controls = [Control("pair", options=[0, 1, 2]), Control("at", options=[0, 1, 2, 3, 4], label="pos")]
    spec = line_explorer(curves, x="pos", y="value", series="curve", points=points, controls=controls).to_dict()
    filters = sorted(_filters(spec), key=len)
    assert filters[0] == 'abs(datum["pair"] - ctl_pair) < 1e-9'  # the curves: the pair only
    assert "ctl_pair" in filters[1] and "ctl_at" in filters[1]  # the point: both
    with pytest.raises(ValueError, match="no record has pair = 7"):
        line_explorer(curves, x="pos", y="value", series="curve", controls=[Control("pair", options=[0, 7])])


def test_inline_data_is_csv_with_typed_columns():
    import csv
    import io

    from course_book.explorers import inline_data

    records = [{"n": 1, "x": 0.5, "flag": True, "text": 'a, "quoted" cell'},
               {"n": 2, "x": -1.0, "flag": False, "text": "plain"}]
    data = inline_data(records).to_dict()
    assert data["format"] == {"type": "csv", "parse": {"n": "number", "x": "number", "flag": "boolean"}}
    rows = list(csv.DictReader(io.StringIO(data["values"])))
    assert rows == [{"n": "1", "x": "0.5", "flag": "true", "text": 'a, "quoted" cell'},
                    {"n": "2", "x": "-1.0", "flag": "false", "text": "plain"}]


def test_a_control_that_changes_nothing_from_the_start_is_refused():
    # the seed acts for sampling only: starting on greedy, moving it changes nothing
    records = [{"strategy": s, "seed": seed, "token": f"{t} x", "p": (0.5 if s == "greedy" else 0.1 * (seed + 1)) + t / 100}
               for s in ("greedy", "sample") for seed in range(3) for t in range(2)]
    controls = [Control("strategy", options=["greedy", "sample"], kind="select"), Control("seed", options=[0, 1, 2])]
    with pytest.raises(ValueError, match="control 'seed' changes nothing from the starting state"):
        bar_explorer(records, x="token", y="p", controls=controls)
    started_on_sampling = [Control("strategy", options=["greedy", "sample"], kind="select", value="sample"), controls[1]]
    bar_explorer(records, x="token", y="p", controls=started_on_sampling)  # every control acts: accepted
    # one other option that changes the marks is enough (seed 2 draws what seed 0 draws, seed 1 does not)
    same = [{**r, "p": 0.3 if r["seed"] != 1 else 0.4} if r["strategy"] == "sample" else r for r in records]
    bar_explorer(same, x="token", y="p", controls=started_on_sampling)


def test_a_control_of_one_layer_only_counts_when_it_changes_that_layer():
    from course_book.explorers import line_explorer

    curves = [{"pair": p, "pos": x, "value": float(x * p), "curve": "sin"} for p in range(2) for x in range(3)]
    points = [{"pair": p, "pos": x, "value": float(x * p), "at": x} for p in range(2) for x in range(3)]
    # "at" moves only the point: it acts although the curves stay
    line_explorer(curves, x="pos", y="value", series="curve", points=points,
                  controls=[Control("pair", options=[0, 1], value=1), Control("at", options=[0, 1, 2])])
    with pytest.raises(ValueError, match="control 'pair' changes nothing"):  # pair 0 is flat zero, so is its point at 0
        flat = [{**r, "value": 0.0} for r in curves]
        line_explorer(flat, x="pos", y="value", series="curve", points=[{**r, "value": 0.0} for r in points],
                      controls=[Control("pair", options=[0, 1]), Control("at", options=[0, 1, 2])])


def test_heatmap_keeps_one_size_in_every_state():
    # states of 2 and of 4 rows/columns: the map is 4 cells wide and high in both, so the controls never move
    records = [{"n": n, "q": f"q{i}", "k": f"k{j}", "v": float(i * j + n)} for n in (2, 4) for i in range(n) for j in range(n)]
    spec = heatmap_explorer(records, x="k", y="q", value="v", cell_size=30,
                            controls=[Control("n", options=[2, 4], kind="select")]).to_dict()
    sizes = [(c.get("width"), c.get("height")) for c in [spec, *spec.get("vconcat", [])] if "width" in c]
    assert (120, 120) in sizes and not any(isinstance(w, dict) for w, _ in sizes), sizes


def test_jupyterlab_draws_the_explorer_as_svg(monkeypatch):
    # SVG text is redrawn when the Chinese font arrives; a canvas keeps the boxes it drew first
    import IPython.display

    from course_book import explorers

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append((a, k)))
    chart = heatmap_explorer(_records(), x="key", y="query", value="weight",
                             controls=[Control("head", options=[0, 1, 2], kind="select")])
    explorers.show_explorer(chart, "weights of one head")
    (bundle,), options = shown[0]
    assert "application/vnd.vegalite.v5+json" in bundle and options["raw"] is True
    assert options["metadata"]["application/vnd.vegalite.v5+json"]["embed_options"]["renderer"] == "svg"


def test_heatmap_rows_and_columns_keep_each_states_own_order():
    # "1 b" comes after "0 a" in state 1 but the label "1 b" first appears in state 2, after "2 c"
    labels = {1: ["0 a", "1 x"], 2: ["0 a", "2 c", "1 b"], 3: ["0 a", "1 b"]}
    records = [{"s": s, "k": k, "q": "q", "v": float(i)} for s, ks in labels.items() for i, k in enumerate(ks)]
    spec = heatmap_explorer(records, x="k", y="q", value="v", controls=[Control("s", options=[1, 2, 3])]).to_dict()
    text = json.dumps(spec)
    x_encodings = [m.group(0) for m in re.finditer(r'"sort": \{"field": "__x_rank", "op": "min"\}', text)]
    assert x_encodings, "the columns are sorted by their rank in the state"
    import csv
    import io

    rows = []
    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("values"), str) and "__x_rank" in node["values"]:
                rows.extend(csv.DictReader(io.StringIO(node["values"])))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(spec)
    ranks = {(int(r["s"]), r["k"]): int(r["__x_rank"]) for r in rows}
    assert ranks[(2, "1 b")] == 2 and ranks[(3, "1 b")] == 1 and ranks[(2, "2 c")] == 1


def _turning_pairs():
    # a query and a key arrow in two panels (pairs) turning with the shift; the key lags by the offset
    import math

    return [{"shift": s, "offset": o, "pair": p, "arrow": name,
             "x": math.cos((s + (0 if name == "query" else -o)) * (p + 1) * 0.3),
             "y": math.sin((s + (0 if name == "query" else -o)) * (p + 1) * 0.3)}
            for s in range(3) for o in range(2) for p in range(2) for name in ("query", "key")]


def test_vector_explorer_draws_a_panel_per_value_filtered_by_the_controls():
    from course_book.explorers import vector_explorer

    captions = [{"shift": s, "offset": o, "caption": f"shift {s}, offset {o}"} for s in range(3) for o in range(2)]
    spec = vector_explorer(_turning_pairs(), x="x", y="y", series="arrow", panel="pair", captions=captions,
                           panel_titles={0: "pair 0", 1: "pair 1"},
                           controls=[Control("shift", options=[0, 1, 2]), Control("offset", options=[0, 1], value=1)]).to_dict()
    assert _all_params(spec)["ctl_offset"]["value"] == 1
    text = json.dumps(spec)
    assert '"title": "pair 0"' in text and '"title": "pair 1"' in text
    filters = _filters(spec)
    # each panel's arrows and tips: its own pair, and both controls
    for p in (0, 1):
        assert sum(f'datum["pair"] == {p}' in f for f in filters) == 2
    assert sum("ctl_shift" in f and "ctl_offset" in f for f in filters) >= 3  # the arrows' layer and the captions
    # the arrows start at the origin; both axes share one square domain
    assert '"x2": {"datum": 0}' in text and '"y2": {"datum": 0}' in text
    domains = {json.dumps(m.group(0)) for m in re.finditer(r'"domain": \[[^\]]*\]', text)}
    assert len(domains) == 1


def test_vector_explorer_refuses_a_control_that_changes_nothing_and_missing_fields():
    from course_book.explorers import vector_explorer

    still = [{**r, "x": 1.0, "y": 0.0} if r["arrow"] == "query" else {**r, "x": 0.0, "y": 1.0} for r in _turning_pairs()]
    with pytest.raises(ValueError, match="control 'shift' changes nothing"):
        vector_explorer(still, x="x", y="y", series="arrow", panel="pair", controls=[Control("shift", options=[0, 1, 2])])
    with pytest.raises(ValueError, match=r"lack the field\(s\) \['pair_id'\]"):
        vector_explorer(_turning_pairs(), x="x", y="y", series="arrow", panel="pair_id",
                        controls=[Control("shift", options=[0, 1, 2])])
    # the offset alone turns the key: the shift is refused when the arrows only depend on the offset
    only_offset = [{**r, "x": math.cos(r["offset"]), "y": math.sin(r["offset"])} for r in _turning_pairs()]
    with pytest.raises(ValueError, match="control 'shift' changes nothing"):
        vector_explorer(only_offset, x="x", y="y", series="arrow", panel="pair",
                        controls=[Control("shift", options=[0, 1, 2]), Control("offset", options=[0, 1])])
