"""Tests of course_book.viz: source display, heatmaps and the widget convention."""

from __future__ import annotations

import ast
import functools
import inspect
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_book import viz  # noqa: E402
from course_lib.masks import causal_mask  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# -- helpers defined in a file, so that inspect can read them ---------------


def _documented(x):
    """A docstring.

    Over several lines, with ``` inside.
    """
    return x + 1


def _only_docstring():
    """Nothing else."""


class _Documented:
    """Class docstring."""

    def method(self):
        """Method docstring."""
        return 1

    @property
    def prop(self):
        """Property docstring."""
        return 2

    @classmethod
    def make(cls):
        return cls()


def _decorator(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@_decorator
def _decorated(y):
    return y * 2


# -- import ------------------------------------------------------------------


def test_import_does_no_heavy_work():
    code = (
        "import sys, course_book.viz\n"
        "heavy = [m for m in ('matplotlib', 'IPython', 'ipywidgets', 'numpy', 'torch')"
        " if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# -- source display ----------------------------------------------------------


def test_get_source_is_the_real_source_with_its_location():
    source = viz.get_source(causal_mask)
    assert source.code == inspect.getsource(causal_mask).rstrip("\n")
    assert source.name == "causal_mask"
    assert source.path == "course_lib/masks.py"
    lines = (REPO / "course_lib" / "masks.py").read_text().splitlines()
    assert lines[source.first_line - 1] == source.code.splitlines()[0]  # its decorator line (the check), then the def
    assert "\ndef causal_mask(" in source.code
    assert source.last_line - source.first_line + 1 == len(source.code.splitlines())


def test_get_source_of_methods_properties_and_decorated_functions():
    method = viz.get_source(_Documented.method)
    assert method.name == "_Documented.method"
    assert method.code.startswith("def method(self):")  # dedented
    assert viz.get_source(_Documented().method).code == method.code  # bound method
    assert viz.get_source(_Documented.make).code.startswith("@classmethod")
    assert "Property docstring" in viz.get_source(_Documented.prop).code
    assert viz.get_source(_decorated).code.startswith("@_decorator\ndef _decorated(y):")
    module = viz.get_source(viz)
    assert module.first_line == 1 and module.path == "course_book/viz.py"


def test_docstrings_can_be_removed_leaving_valid_code():
    code = viz.get_source(_documented, docstring=False).code
    assert code == "def _documented(x):\n    return x + 1"
    only = viz.get_source(_only_docstring, docstring=False).code
    assert only == "def _only_docstring():\n    ..."
    cls = viz.get_source(_Documented, docstring=False).code
    assert "docstring" not in cls
    ast.parse(cls)
    ast.parse(viz.get_source(causal_mask, docstring=False).code)


def test_markdown_repr_is_a_python_block_that_cannot_be_closed_early():
    source = viz.get_source(_documented)
    markdown = source._repr_markdown_()
    assert "```" in source.code
    assert "\n````python\n" in markdown and markdown.rstrip().endswith("````")
    assert markdown.startswith(f"`_documented` from `{source.path}`, lines {source.first_line}\u2013{source.last_line}\n")
    plain = viz.get_source(causal_mask)._repr_markdown_()
    assert "\n```python\n" in plain


def test_plain_text_repr_names_the_file():
    text = str(viz.get_source(causal_mask))
    assert text.startswith("# causal_mask (course_lib/masks.py, lines ")
    assert repr(viz.get_source(causal_mask)) == text


def test_show_source_prints_outside_ipython(capsys, monkeypatch):
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert viz.show_source(causal_mask) is None
    out = capsys.readouterr().out
    assert "def causal_mask(" in out and "course_lib/masks.py" in out


def test_show_source_displays_in_ipython(monkeypatch):
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    viz.show_source(causal_mask, docstring=False)
    assert len(shown) == 1 and isinstance(shown[0], viz.SourceCode)
    assert '"""' not in shown[0].code


@pytest.mark.parametrize("obj", [len, 3, "text", torch.zeros(2)])
def test_get_source_rejects_objects_without_python_source(obj):
    with pytest.raises(TypeError, match="no readable source"):
        viz.get_source(obj)


# -- heatmaps ----------------------------------------------------------------


def test_heatmap_of_a_tensor_with_labels():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = viz.plot_heatmap(
        weights, x_labels=list("abcd"), y_labels=["x", "y", "z"], title="attention",
        xlabel="key", ylabel="query",
    )
    image = ax.get_images()[0]
    np.testing.assert_allclose(image.get_array(), weights.numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y", "z"]
    assert ax.get_title() == "attention"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("key", "query")
    assert len(ax.figure.axes) == 2  # the colour bar


def test_heatmap_of_a_boolean_mask_has_a_two_colour_bar():
    ax = viz.plot_heatmap(causal_mask(4)[0, 0], annotate=True)
    colorbar_ax = ax.figure.axes[1]
    assert [t.get_text() for t in colorbar_ax.get_yticklabels()] == ["False", "True"]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("T") == 10 and texts.count("F") == 6
    assert ax.get_images()[0].cmap.N == 2


def test_heatmap_draws_on_a_given_axes_and_accepts_lists_and_half_precision():
    fig, (left, right) = plt.subplots(1, 2)
    assert viz.plot_heatmap([[1, 2], [3, 4]], ax=left, colorbar=False) is left
    assert viz.plot_heatmap(torch.ones(2, 3, dtype=torch.bfloat16), ax=right) is right
    assert plt.get_fignums() == [fig.number]
    ax = viz.plot_heatmap(np.eye(2), annotate=True, fmt="{:.1f}", colorbar=False)
    assert sorted(t.get_text() for t in ax.texts) == ["0.0", "0.0", "1.0", "1.0"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(matrix=torch.zeros(2, 2, 2)), "2-D"),
        (dict(matrix=np.array([["a", "b"]])), "numbers or booleans"),
        (dict(matrix=torch.zeros(2, 3), x_labels=["a", "b"]), "x_labels has 2 labels for 3"),
        (dict(matrix=torch.zeros(2, 3), y_labels=["a"]), "y_labels has 1 labels for 2"),
    ],
)
def test_heatmap_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        viz.plot_heatmap(**kwargs)


# -- widgets -----------------------------------------------------------------


def _record_display(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    return shown


def test_explorer_draws_static_figures_then_the_widget(monkeypatch):
    shown = _record_display(monkeypatch)
    calls = []

    def draw(freq=1.0, kind="sin"):
        calls.append((freq, kind))
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, freq])
        return ax  # an Axes is accepted as well as a Figure

    widget = viz.explorer_with_static(
        draw, [dict(freq=1.0), dict(freq=2.0, kind="cos")], freq=(0.5, 3.0, 0.5)
    )
    import ipywidgets

    assert calls[:2] == [(1.0, "sin"), (2.0, "cos")]
    assert [type(obj).__name__ for obj in shown] == ["Figure", "Figure", "interactive"]
    assert isinstance(widget, ipywidgets.interactive) and shown[-1] is widget
    # as with ipywidgets.interact, every parameter with a default gets a control
    assert [c.description for c in widget.children[:-1]] == ["freq", "kind"]
    # the static figures were closed after being displayed
    from matplotlib._pylab_helpers import Gcf

    open_figures = [manager.canvas.figure for manager in Gcf.get_all_fig_managers()]
    assert not any(fig in open_figures for fig in shown[:2])


def test_explorer_fixed_parameters_get_no_control(monkeypatch):
    import ipywidgets

    _record_display(monkeypatch)

    def draw(freq=1.0, kind="sin"):
        plt.figure()

    widget = viz.explorer_with_static(
        draw, dict(freq=1.0), freq=(0.5, 3.0, 0.5), kind=ipywidgets.fixed("sin")
    )
    assert [c.description for c in widget.children[:-1]] == ["freq"]


def test_explorer_without_controls_only_draws_static_figures(monkeypatch):
    shown = _record_display(monkeypatch)

    def draw(n):
        plt.figure()
        plt.plot(range(n))

    assert viz.explorer_with_static(draw, dict(n=3)) is None
    assert len(shown) == 1 and plt.get_fignums() == []


def test_explorer_rejects_bad_static_settings(monkeypatch):
    _record_display(monkeypatch)
    with pytest.raises(ValueError, match="at least one"):
        viz.explorer_with_static(lambda: None, [])
    with pytest.raises(TypeError, match="dict of keyword arguments"):
        viz.explorer_with_static(lambda n: None, [3])


def test_heatmap_turns_short_column_labels_when_they_do_not_fit():
    """Short tokens side by side in a narrow panel would run together ("thecatsat"): they are turned."""
    import matplotlib.pyplot as plt
    import numpy as np

    from course_book.viz import plot_heatmap

    tokens = "the cat sat on the mat".split()
    fig, axes = plt.subplots(1, 4, figsize=(8, 2.8))
    plot_heatmap(np.eye(6), x_labels=tokens, y_labels=tokens, ax=axes[0], colorbar=False)
    wide_fig, wide = plt.subplots(figsize=(5.5, 3.8))
    plot_heatmap(np.eye(6), x_labels=tokens, y_labels=tokens, ax=wide, colorbar=False)
    assert {t.get_rotation() for t in axes[0].get_xticklabels()} == {90.0}
    assert {t.get_rotation() for t in wide.get_xticklabels()} == {0.0}
    plt.close(fig)
    plt.close(wide_fig)
