"""Explorers that respond without a kernel: Vega-Lite charts built with Altair.

An explorer is a chart with controls (a slider, a dropdown, a checkbox). All
the states a reader can choose are computed once, in Python, when the cell
runs; the chart carries them as data and the controls only filter it. So the
figure follows the controls everywhere the chart is drawn: in the web book
(the book serves Vega's JavaScript itself, so offline too), in JupyterLab and
Notebook 7 (which draw Vega-Lite natively), with or without a running kernel.

Three calls make one:

* :class:`Control` – one control: the data field it sets and its options;
* :func:`heatmap_explorer` / :func:`bar_explorer` / :func:`line_explorer` /
  :func:`vector_explorer` – the chart;
* :func:`show_explorer` – display it (in a notebook: the chart, for the web
  book the same chart as HTML, and a one-line text description for readers
  without either).

Example::

    records = [{"head": h, "query": q, "key": k, "weight": float(w[h, i, j])} ...]
    chart = heatmap_explorer(records, x="key", y="query", value="weight",
                             controls=[Control("head", options=[0, 1, 2, 3], kind="select")])
    show_explorer(chart, "attention weights of one head; choose the head")

Every state's records are in the chart, so keep the number of states and the
size of each modest (a few thousand records in all).
"""

from __future__ import annotations

import csv
import io
import json
import math
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

__all__ = [
    "Control", "heatmap_explorer", "bar_explorer", "line_explorer", "vector_explorer", "explorer_bundle", "show_explorer",
    "inline_data",
]

_KINDS = ("slider", "select", "radio", "checkbox")
CHART_FONT = '"DejaVu Sans", "Noto Sans SC", sans-serif'  # like the matplotlib figures (viz.use_cjk_font)


@dataclass(frozen=True)
class Control:
    """One control of an explorer.

    Attributes:
        field: the record field this control selects on (also the control's name).
        options: the values it can take; every value must occur in the records.
            A slider's options must be evenly spaced numbers.
        kind: ``"slider"``, ``"select"`` (dropdown), ``"radio"`` or ``"checkbox"``
            (options ``[False, True]``).
        label: the text next to the control (default: ``field``).
        option_labels: names shown for the options of a select or radio.
        value: the starting value (default: the first option).
    """

    field: str
    options: Sequence[Any]
    kind: str = "slider"
    label: str | None = None
    option_labels: Sequence[str] | None = None
    value: Any = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}; got {self.kind!r}")
        if len(self.options) == 0:
            raise ValueError(f"options of control {self.field!r} must not be empty")
        if self.kind == "checkbox" and list(self.options) != [False, True]:
            raise ValueError(f"a checkbox's options must be [False, True]; got {list(self.options)!r}")
        if self.kind == "slider":
            _check_even_steps(self.field, self.options)
        if self.option_labels is not None and len(self.option_labels) != len(self.options):
            raise ValueError(
                f"option_labels of control {self.field!r} must have one label per option "
                f"({len(self.options)}); got {len(self.option_labels)}"
            )
        if self.value is not None and self.value not in self.options:
            raise ValueError(f"value of control {self.field!r} must be one of its options; got {self.value!r}")

    @property
    def start(self) -> Any:
        """The value the control starts at."""
        return self.options[0] if self.value is None else self.value


def _check_even_steps(field: str, options: Sequence[Any]) -> None:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in options):
        raise ValueError(f"a slider's options must be numbers; control {field!r} got {list(options)!r}")
    steps = [b - a for a, b in zip(options, options[1:])]
    if steps and (steps[0] <= 0 or any(not math.isclose(s, steps[0], rel_tol=1e-9) for s in steps)):
        raise ValueError(f"a slider's options must increase in equal steps; control {field!r} got {list(options)!r}")


def _param(control: Control):
    import altair as alt

    name = control.label or control.field
    if control.kind == "slider":
        step = control.options[1] - control.options[0] if len(control.options) > 1 else 1
        bind = alt.binding_range(min=control.options[0], max=control.options[-1], step=step, name=f"{name} ")
    elif control.kind == "checkbox":
        bind = alt.binding_checkbox(name=f"{name} ")
    else:
        binding = alt.binding_select if control.kind == "select" else alt.binding_radio
        labels = {"labels": list(control.option_labels)} if control.option_labels is not None else {}
        bind = binding(options=list(control.options), name=f"{name} ", **labels)
    return alt.param(name=_param_name(control.field), value=control.start, bind=bind)


def _param_name(field: str) -> str:
    return "ctl_" + "".join(c if c.isalnum() else "_" for c in field)


def _filter_expression(controls: Sequence[Control]) -> str:
    """One Vega expression: the record matches every control's current value."""
    parts = []
    for c in controls:
        value, param = f"datum[{json.dumps(c.field)}]", _param_name(c.field)
        if c.kind == "slider":  # a slider's value is a float: compare with a tolerance
            parts.append(f"abs({value} - {param}) < 1e-9")
        else:
            parts.append(f"{value} == {param}")
    return " && ".join(parts) or "true"


def _check_records(records: Sequence[Mapping[str, Any]], controls: Sequence[Control], fields: Sequence[str]) -> None:
    if len(records) == 0:
        raise ValueError("records must not be empty")
    missing = [f for f in [*fields, *(c.field for c in controls)] if f not in records[0]]
    if missing:
        raise ValueError(f"records lack the field(s) {missing}; the first record has {sorted(records[0])}")
    for c in controls:
        seen = {r[c.field] for r in records}
        absent = [v for v in c.options if not any(_same(v, s) for s in seen)]
        if absent:
            raise ValueError(f"no record has {c.field} = {absent[0]!r} (an option of its control)")


def _marks(records: Sequence[Mapping[str, Any]], controls: Sequence[Control], state: Mapping[str, Any]) -> list:
    """What the chart draws in ``state`` (a value per control field): the records that pass its
    filter (the controls whose field the records carry), without the controls' fields, sorted."""
    mine = [c for c in controls if c.field in records[0]]
    shown = [r for r in records if all(_same(r[c.field], state[c.field]) for c in mine)]
    return sorted(repr(sorted((k, v) for k, v in r.items() if all(k != c.field for c in mine))) for r in shown)


def _check_controls_act(layers: Sequence[Sequence[Mapping[str, Any]]], controls: Sequence[Control]) -> None:
    """Refuse an explorer with a control that changes nothing from the chart's starting state.

    A reader's first move of a control should change the picture: for each
    control, at least one of its other options must draw different marks
    (``layers``: the records of each drawn layer; captions do not count).
    A control that acts only in some states (a sampling seed, under greedy
    search) must therefore act in the starting one.

    Raises:
        ValueError: naming the control that no move changes.
    """
    start = {c.field: c.start for c in controls}
    for c in controls:
        before = [_marks(layer, controls, start) for layer in layers]
        if not any([_marks(layer, controls, {**start, c.field: v}) for layer in layers] != before
                   for v in c.options if not _same(v, c.start)):
            raise ValueError(
                f"control {c.field!r} changes nothing from the starting state {start}: no other option draws "
                "different marks (start where it acts, or leave it out)")


def inline_data(records: Sequence[Mapping[str, Any]]):
    """The records as compact inline CSV for the chart, with each column's type stated.

    A chart carries every state it can show, so its data is most of its size;
    CSV with one header is several times smaller than a list of JSON objects
    (and the notebook stores the chart twice: for Jupyter and for the web
    page). Columns of ``bool`` parse as booleans, of ``int``/``float`` as
    numbers; the others stay strings.
    """
    import altair as alt

    fields = list(records[0])
    parse = {}
    for name in fields:
        kinds = {type(r[name]) for r in records}
        if kinds <= {bool}:
            parse[name] = "boolean"
        elif kinds <= {int, float}:
            parse[name] = "number"
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(fields)
    for r in records:
        writer.writerow(["true" if r[f] is True else "false" if r[f] is False else r[f] for f in fields])
    return alt.Data(values=buffer.getvalue(), format=alt.DataFormat(type="csv", parse=parse))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
    return a == b


def _with_controls(chart, controls: Sequence[Control], captions: Sequence[Mapping[str, Any]] | None, width: int):
    """Bind the controls to ``chart`` (whose layers filter on them) and put its captions above it."""
    import altair as alt

    params = [_param(c) for c in controls]
    if captions:
        _check_records(captions, controls, ["caption"])
        line = (
            alt.Chart(inline_data(captions))
            .transform_filter(_filter_expression(controls))
            .mark_text(align="left", baseline="middle", fontSize=13, limit=width + 80)
            .encode(text="caption:N", x=alt.value(0), y=alt.value(8))
            .properties(width=width, height=16)
        )
        chart = alt.vconcat(line, chart, spacing=4)
    # Chinese labels: the book serves Noto Sans SC (book/_assets/course.css), and so does JupyterLab
    # once the course is installed (scripts/install_lab_font.py); elsewhere the system's font.
    return chart.add_params(*params).configure(font=CHART_FONT, view={"stroke": None})


def heatmap_explorer(
    records: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    value: str,
    controls: Sequence[Control],
    captions: Sequence[Mapping[str, Any]] | None = None,
    domain: tuple[float, float] | None = None,
    annotate: bool = True,
    x_title: str | None = None,
    y_title: str | None = None,
    value_title: str | None = None,
    cell_size: int = 34,
):
    """A heatmap (``y`` rows by ``x`` columns, colour = ``value``) that follows its controls.

    Args:
        records: one dict per cell per state: ``{x: ..., y: ..., value: float,
            <control field>: ..., ...}``; each state's rows and columns keep
            their order of first appearance in that state's records.
        x, y, value: the field names of column, row and cell value.
        controls: the :class:`Control` objects; each record carries their fields.
        captions: optional one dict per state: the controls' fields and
            ``"caption"`` (a line of text shown above the map).
        domain: the colour scale's (low, high); default: the data's range over all states.
        annotate: write each cell's value in it (2 decimals).
        x_title, y_title, value_title: axis and legend titles.
        cell_size: pixels per cell in the state with the most rows and columns (the map
            keeps that size in every state).

    Returns:
        an Altair chart; display it with :func:`show_explorer`.

    Raises:
        ValueError: empty records, a record without a named field or a
            control's field, a control option that no record has, or a control
            that changes nothing from the starting state.
    """
    import altair as alt

    _check_records(records, controls, [x, y, value])
    scale = alt.Scale(scheme="viridis", domain=list(domain)) if domain else alt.Scale(scheme="viridis")
    # rows and columns in their order within each state (one label may sit at different places in two states)
    ranked = _with_ranks(_with_ranks(records, controls, x, "__x_rank"), controls, y, "__y_rank")
    base = _layer(ranked, controls, [x, y, value]).encode(
        x=alt.X(f"{x}:N", sort=alt.EncodingSortField(field="__x_rank", op="min"), title=x_title or x,
                axis=alt.Axis(labelAngle=0)),
        y=alt.Y(f"{y}:N", sort=alt.EncodingSortField(field="__y_rank", op="min"), title=y_title or y),
    )
    chart = base.mark_rect().encode(color=alt.Color(f"{value}:Q", scale=scale, title=value_title or value),
                                    tooltip=[f"{y}:N", f"{x}:N", alt.Tooltip(f"{value}:Q", format=".3f")])
    if annotate:
        text = base.mark_text(fontSize=10).encode(
            text=alt.Text(f"{value}:Q", format=".2f"),
            color=alt.condition(f"datum[{json.dumps(value)}] > {_midpoint(records, value, domain)}",
                                alt.value("black"), alt.value("white")),
        )
        chart = chart + text
    _check_controls_act([records], controls)
    # One size for every state (the largest state's cells are cell_size pixels; a smaller state's cells
    # are larger), so the controls below the map never move while a reader drags them.
    width, height = (cell_size * _most_per_state(records, controls, f) for f in (x, y))
    chart = chart.properties(width=width, height=height)
    return _with_controls(chart, controls, captions, max(120, width))


def _with_ranks(records: Sequence[Mapping[str, Any]], controls: Sequence[Control], field: str, rank: str) -> list:
    """The records, each with ``rank``: where its ``field`` value first appears in its own state's records."""
    orders: dict[tuple, dict] = {}
    out = []
    for r in records:
        order = orders.setdefault(tuple(r[c.field] for c in controls), {})
        out.append({**r, rank: order.setdefault(r[field], len(order))})
    return out


def _most_per_state(records: Sequence[Mapping[str, Any]], controls: Sequence[Control], field: str) -> int:
    """The largest number of distinct ``field`` values in one state (one setting of the controls)."""
    states: dict[tuple, set] = {}
    for r in records:
        states.setdefault(tuple(r.get(c.field) for c in controls), set()).add(r[field])
    return max(len(v) for v in states.values())


def _midpoint(records: Sequence[Mapping[str, Any]], value: str, domain: tuple[float, float] | None) -> float:
    low, high = domain if domain else (min(r[value] for r in records), max(r[value] for r in records))
    return (low + high) / 2


def bar_explorer(
    records: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    controls: Sequence[Control],
    captions: Sequence[Mapping[str, Any]] | None = None,
    color: str | None = None,
    colors: Mapping[str, str] | None = None,
    y_domain: tuple[float, float] | None = None,
    rule: float | None = None,
    x_title: str | None = None,
    y_title: str | None = None,
    width: int = 420,
    height: int = 200,
):
    """A bar chart (one bar per ``x``, height ``y``) that follows its controls.

    Args:
        records: one dict per bar per state: ``{x: ..., y: float, <control field>: ...}``;
            bars keep the order of first appearance. Give each state's bars
            distinct ``x`` values (e.g. ``"3: the"`` for position 3).
        x, y: the field names of the bar's label and height.
        controls, captions: as in :func:`heatmap_explorer`.
        color: an optional field whose (categorical) value colours the bars.
        colors: with ``color``, the colour of each of its values, e.g.
            ``{"p < 0.5": "#d62728", "p >= 0.5": "#1f77b4"}``.
        y_domain: the y axis's (low, high); default: from the data.
        rule: draw a dotted horizontal line at this height (e.g. a uniform baseline).
        x_title, y_title: axis titles. width, height: pixels.

    Returns:
        an Altair chart; display it with :func:`show_explorer`.

    Raises:
        ValueError: empty records, a record without a named field or a
            control's field, a control option that no record has, or a control
            that changes nothing from the starting state.
    """
    import altair as alt

    _check_records(records, controls, [x, y] + ([color] if color else []))
    y_scale = alt.Scale(domain=list(y_domain)) if y_domain else alt.Scale()
    encoding = dict(
        x=alt.X(f"{x}:N", sort=None, title=x_title or x, axis=alt.Axis(labelAngle=0)),
        y=alt.Y(f"{y}:Q", scale=y_scale, title=y_title or y),
        tooltip=[f"{x}:N", alt.Tooltip(f"{y}:Q", format=".3f")],
    )
    if color:
        scale = alt.Scale(domain=list(colors), range=list(colors.values())) if colors else alt.Scale()
        encoding["color"] = alt.Color(f"{color}:N", title=color, scale=scale)
    chart = _layer(records, controls, [x, y]).mark_bar().encode(**encoding)
    _check_controls_act([records], controls)
    if rule is not None:
        line = alt.Chart(alt.Data(values=[{"y": rule}])).mark_rule(strokeDash=[2, 3], color="grey").encode(y="y:Q")
        chart = chart + line
    return _with_controls(chart.properties(width=width, height=height), controls, captions, width)


def line_explorer(
    curves: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    series: str,
    controls: Sequence[Control],
    points: Sequence[Mapping[str, Any]] | None = None,
    captions: Sequence[Mapping[str, Any]] | None = None,
    y_domain: tuple[float, float] | None = None,
    x_title: str | None = None,
    y_title: str | None = None,
    width: int = 480,
    height: int = 220,
):
    """Curves (one line per ``series`` value) and marked points that follow the controls.

    Unlike the other explorers, ``curves`` and ``points`` may each carry only
    some of the controls' fields: each layer is filtered by the controls whose
    field it has (e.g. the curves of a dimension pair depend on the pair
    only, the marked point on the pair and the position).

    Args:
        curves: one dict per point of a curve: ``{x: float, y: float, series: str, ...}``.
        x, y, series: field names of the position along the curve, its value and its name.
        controls: the :class:`Control` objects.
        points: optional marked points ``{x: ..., y: ..., ...}``, drawn as black dots.
        captions: as in :func:`heatmap_explorer`.
        y_domain: the y axis's (low, high). x_title, y_title: axis titles. width, height: pixels.

    Returns:
        an Altair chart; display it with :func:`show_explorer`.

    Raises:
        ValueError: empty records, a record without a named field or a
            control's field, a control option that no record has, or a control
            that changes nothing from the starting state.
    """
    import altair as alt

    if not curves:
        raise ValueError("curves must not be empty")
    y_scale = alt.Scale(domain=list(y_domain)) if y_domain else alt.Scale()
    layers = [_layer(curves, controls, [x, y, series]).mark_line().encode(
        x=alt.X(f"{x}:Q", title=x_title or x), y=alt.Y(f"{y}:Q", scale=y_scale, title=y_title or y),
        color=alt.Color(f"{series}:N", title=None))]
    if points:
        layers.append(_layer(points, controls, [x, y]).mark_point(filled=True, color="black", size=50).encode(
            x=f"{x}:Q", y=f"{y}:Q", tooltip=[alt.Tooltip(f"{x}:Q"), alt.Tooltip(f"{y}:Q", format=".3f")]))
    _check_controls_act([curves, *([points] if points else [])], controls)
    chart = alt.layer(*layers).properties(width=width, height=height)
    return _with_controls(chart, controls, captions, width)


def vector_explorer(
    records: Sequence[Mapping[str, Any]],
    *,
    x: str,
    y: str,
    series: str,
    panel: str,
    controls: Sequence[Control],
    captions: Sequence[Mapping[str, Any]] | None = None,
    radius: float | None = None,
    panel_titles: Mapping[Any, str] | None = None,
    size: int = 170,
):
    """Arrows from the origin of a plane (one per ``series`` value), one square panel per ``panel`` value, that follow the controls.

    Made for 2-D pairs of features that turn (rotary position embeddings): a
    grey unit circle scaled to ``radius``, a line from ``(0, 0)`` to each
    record's ``(x, y)`` and a dot at its tip, coloured by ``series``.

    Args:
        records: one dict per arrow per state: ``{x: float, y: float, series: str,
            panel: ..., <control field>: ...}``.
        x, y: the field names of the arrow's tip; series: its name (the colour);
            panel: the field whose values get one panel each (in order of first appearance).
        controls, captions: as in :func:`heatmap_explorer`.
        radius: the half-width of every panel's square axes and the circle's radius
            (default: the longest arrow over all states).
        panel_titles: the title of each panel value (default ``"<panel> = <value>"``).
        size: pixels of one panel's side.

    Returns:
        an Altair chart; display it with :func:`show_explorer`.

    Raises:
        ValueError: empty records, a record without a named field or a
            control's field, a control option that no record has, or a control
            that changes nothing from the starting state.
    """
    import altair as alt

    _check_records(records, controls, [x, y, series, panel])
    radius = radius or max(math.hypot(r[x], r[y]) for r in records)
    scale = alt.Scale(domain=[-1.05 * radius, 1.05 * radius])
    circle = alt.Chart(alt.Data(values=[{"t": t, "cx": radius * math.cos(t * math.pi / 36), "cy": radius * math.sin(t * math.pi / 36)}
                                        for t in range(73)])).mark_line(color="lightgray").encode(
        x=alt.X("cx:Q", scale=scale, title=None), y=alt.Y("cy:Q", scale=scale, title=None), order="t:Q")
    base = _layer(records, controls, [x, y, series, panel])
    colour = alt.Color(f"{series}:N", title=None)
    panels = []
    for value in dict.fromkeys(r[panel] for r in records):
        mine = base.transform_filter(f"datum[{json.dumps(panel)}] == {json.dumps(value)}")
        arrows = mine.mark_rule(strokeWidth=2).encode(
            x=alt.X(f"{x}:Q", scale=scale, title=None), y=alt.Y(f"{y}:Q", scale=scale, title=None),
            x2=alt.datum(0), y2=alt.datum(0), color=colour)
        tips = mine.mark_point(filled=True, size=60).encode(
            x=f"{x}:Q", y=f"{y}:Q", color=colour, tooltip=[f"{series}:N", alt.Tooltip(f"{x}:Q", format=".3f"),
                                                            alt.Tooltip(f"{y}:Q", format=".3f")])
        title = (panel_titles or {}).get(value, f"{panel} = {value}")
        panels.append(alt.layer(circle, arrows, tips).properties(width=size, height=size, title=title))
    _check_controls_act([records], controls)
    return _with_controls(alt.hconcat(*panels, spacing=12), controls, captions, len(panels) * (size + 12))


def _layer(records: Sequence[Mapping[str, Any]], controls: Sequence[Control], fields: Sequence[str]):
    """A chart of ``records`` filtered by the controls whose field the records carry."""
    import altair as alt

    mine = [c for c in controls if c.field in records[0]]
    _check_records(records, mine, fields)
    return alt.Chart(inline_data(records)).transform_filter(_filter_expression(mine))


def explorer_bundle(chart, description: str) -> dict[str, Any]:
    """The MIME bundle of an explorer: Vega-Lite for notebooks, text, the HTML of the web book and
    its Chinese version (``course_book.i18n.BOOK_MIME_TYPE`` and ``MIME_TYPE``, which only the book renders).

    The HTML calls ``vegaEmbed`` from the page's own scripts (the book loads
    Vega from ``_static/vendor/vega/``; see ``book/_ext/page_assets.py``) and
    says what is missing if they are not there; it never fetches anything.
    """
    from . import i18n

    if not isinstance(description, str) or not description.strip():
        raise ValueError("description must be a non-empty str (what the explorer shows, for readers without it)")
    spec = chart.to_dict()
    catalog = i18n.Catalog.load()
    zh_html = _explorer_html(i18n.translate_spec(spec, catalog), catalog.gettext(description),
                             catalog.gettext("interactive chart: it needs JavaScript"),
                             catalog.gettext("The chart could not be drawn:"))
    html = _explorer_html(spec, description, "interactive chart: it needs JavaScript", "The chart could not be drawn:")
    return {
        "application/vnd.vegalite.v5+json": spec,  # what JupyterLab and Notebook draw
        "text/plain": f"<explorer: {description}>",
        i18n.BOOK_MIME_TYPE: {"text/html": html},  # the web book (not text/html: JupyterLab would prefer it)
        i18n.MIME_TYPE: catalog.payload(**{"text/html": zh_html}),
    }


def _explorer_html(spec: dict[str, Any], description: str, needs_js: str, failed: str) -> str:
    element = f"course-explorer-{uuid.uuid4().hex[:12]}"
    spec_json = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
    return (
        f'<div class="course-explorer" id="{element}" role="figure" aria-label="{_attr(description)}">'
        f'<p class="course-explorer-fallback">{_text(description)} ({_text(needs_js)})</p></div>\n'
        f'<script type="text/javascript">(function () {{\n'
        f'  var el = document.getElementById("{element}");\n'
        f'  if (typeof vegaEmbed !== "function") {{ return; }}\n'
        f'  el.textContent = "";\n'
        f'  vegaEmbed(el, {spec_json}, {{"actions": false, "renderer": "svg"}})\n'
        f'    .catch(function (err) {{ el.textContent = {json.dumps(failed + " ")} + err; }});\n'
        f"}})();</script>"
    )


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def show_explorer(chart, description: str) -> None:
    """Display an explorer made by :func:`heatmap_explorer` or :func:`bar_explorer`.

    ``description`` says in one sentence what the chart shows and what its
    controls change (the text readers without the chart get, and its
    accessible name).
    """
    from IPython.display import display

    display(explorer_bundle(chart, description), metadata=LAB_METADATA, raw=True)


# JupyterLab draws the chart as SVG rather than on a canvas: SVG text is redrawn when a font arrives,
# so the Chinese font that the course installs into JupyterLab (scripts/install_lab_font.py) shows up
# even when the chart is drawn before the font has loaded; on a canvas the first picture would keep
# empty boxes.
LAB_METADATA = {"application/vnd.vegalite.v5+json": {"embed_options": {"renderer": "svg"}}}
