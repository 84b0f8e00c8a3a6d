"""Display helpers for the book and the exercise notebooks (all chapters).

Four things live here:

* :func:`show_source` / :func:`get_source` - show the *real* source of a
  ``course_lib`` function, class or method, so that the book never drifts from
  the library: the chapters display the code that the tests exercise.
* :func:`plot_heatmap` - one consistent picture for every matrix of the course:
  attention weights, masks, positional encodings.
* :func:`explorer_with_static` - the widget convention of the book.
* :func:`use_cjk_font` - Chinese characters in figures, from the font that
  ships with ``course_lib`` (no system font needed).

The widget convention
---------------------
**Every interactive widget has a static figure next to it.** The HTML book saves
a snapshot of each widget: the slider is drawn, but moving it cannot recompute
anything without a running kernel, and a reader of a PDF or of a notebook
preview sees no widget at all. So each explorer first draws one or more static
figures for fixed, representative settings (these are ordinary images that the
book keeps and that nbval never compares), and only then the live widget for
readers who run the notebook. :func:`explorer_with_static` does both; a chapter
that builds its own widget must follow the same rule. Tag a widget cell
``nbval-ignore-output``: its outputs differ from run to run.

Importing this module does no work: matplotlib, IPython and ipywidgets are
imported inside the functions that need them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SourceCode",
    "get_source",
    "show_source",
    "plot_heatmap",
    "explorer_with_static",
    "use_cjk_font",
    "CJK_FONT_FILE",
]

#: The Chinese font bundled with course_lib: a subset of Noto Sans SC Regular
#: (SIL OFL 1.1; see course_book/fonts/README.md for its characters and how it was made).
CJK_FONT_FILE = Path(__file__).parent / "fonts" / "NotoSansSC-Regular-subset.ttf"


# ---------------------------------------------------------------------------
# Source display
# ---------------------------------------------------------------------------


SOURCE_CAPTION = "`{name}` from `{path}`, lines {first}\u2013{last}"
"""The line above a listing: the words stay outside the code spans, so that the Chinese
edition translates them (``outputs.po``; :class:`course_book.i18n.BookRenderer`)."""


@dataclass(frozen=True)
class SourceCode:
    """The source text of one Python object, with where it came from.

    Jupyter (and the book) show it as a syntax-highlighted Python block through
    ``_repr_markdown_``; ``str()`` and ``repr()`` give plain text for a terminal.

    Attributes:
        code: the source text (dedented; docstrings removed if so requested).
        name: the qualified name of the object, e.g. ``"MultiHeadAttention.forward"``.
        path: the file, relative to the repository root when it is inside it.
        first_line: the line number of the first source line in ``path``.
        last_line: the line number of the last source line in ``path``.
    """

    code: str
    name: str
    path: str
    first_line: int
    last_line: int

    @property
    def location(self) -> str:
        """``"path, lines A-B"``: where to find the code in the repository."""
        return f"{self.path}, lines {self.first_line}\u2013{self.last_line}"

    @property
    def caption(self) -> str:
        """The line above the listing: ``"`name` from `path`, lines A-B"`` (:data:`SOURCE_CAPTION`)."""
        return SOURCE_CAPTION.format(name=self.name, path=self.path, first=self.first_line, last=self.last_line)

    def _repr_markdown_(self) -> str:
        # A fence longer than any backtick run inside the code, so that code
        # containing ``` (in a docstring, say) cannot end the block early.
        longest = max((len(m) for m in re.findall(r"`+", self.code)), default=0)
        fence = "`" * max(3, longest + 1)
        return f"{self.caption}\n\n{fence}python\n{self.code}\n{fence}\n"

    def __str__(self) -> str:
        return f"# {self.name} ({self.location})\n{self.code}"

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython's plain-text hook
        p.text(str(self))


def _strip_docstrings(code: str) -> str:
    """Remove the docstrings of every function and class defined in ``code``.

    A body that held only a docstring becomes ``...`` so the code stays valid.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:  # pragma: no cover - getsource returns whole definitions
        return code
    lines = code.splitlines()
    drop: set[int] = set()
    replace: dict[int, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        first = node.body[0]
        if not (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            continue
        start, end = first.lineno, first.end_lineno or first.lineno
        header_end = node.lineno
        if start == header_end or any(
            getattr(n, "lineno", start) == start for n in node.body[1:]
        ):
            continue  # docstring shares a line with other code: leave it alone
        if len(node.body) == 1:
            indent = lines[start - 1][: first.col_offset]
            replace[start] = f"{indent}..."
            drop.update(range(start + 1, end + 1))
        else:
            drop.update(range(start, end + 1))
            # also drop one blank line that followed the docstring
            if end < len(lines) and not lines[end].strip():
                drop.add(end + 1)
    out = []
    for number, line in enumerate(lines, start=1):
        if number in replace:
            out.append(replace[number])
        elif number not in drop:
            out.append(line)
    return "\n".join(out)


def _display_path(filename: str) -> str:
    """``filename`` relative to the repository root when it lies inside it."""
    package_dir = os.path.dirname(os.path.abspath(__file__))
    repo_root = os.path.dirname(package_dir)
    absolute = os.path.abspath(filename)
    if absolute.startswith(repo_root + os.sep):
        return os.path.relpath(absolute, repo_root).replace(os.sep, "/")
    return os.path.basename(absolute)


def get_source(obj: Any, *, docstring: bool = True) -> SourceCode:
    """Return the source code of a function, class, method, property or module.

    The code is read from the ``.py`` file with :func:`inspect.getsource`, so it
    is exactly what runs. Decorated functions are unwrapped (``__wrapped__``).

    Args:
        obj: a Python function, class, method (bound or not), ``property`` or
            module defined in a source file - typically something from
            ``course_lib``, e.g. ``course_lib.attention.MultiHeadAttention.forward``.
        docstring: keep the docstrings (default). ``False`` removes the
            docstrings of the object and of every function and class inside it,
            which keeps the code on a page short.

    Returns:
        A :class:`SourceCode`, shown highlighted in Jupyter and as plain text
        elsewhere.

    Raises:
        TypeError: if ``obj`` has no Python source (a builtin, a C extension,
            an instance, a function defined interactively in a notebook...).
    """
    target = obj.fget if isinstance(obj, property) else obj
    target = inspect.unwrap(target) if callable(target) else target
    target = getattr(target, "__func__", target)  # bound and class methods
    try:
        lines, first_line = inspect.getsourcelines(target)
        filename = inspect.getsourcefile(target) or inspect.getfile(target)
    except (TypeError, OSError) as error:
        raise TypeError(
            f"show_source needs a function, class, method, property or module "
            f"defined in a .py file; {obj!r} has no readable source ({error})"
        ) from error
    code = textwrap.dedent("".join(lines)).rstrip("\n")
    if not docstring:
        code = _strip_docstrings(code)
    first_line = max(first_line, 1)  # modules report line 0
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(obj))
    return SourceCode(
        code=code,
        name=name,
        path=_display_path(filename),
        first_line=first_line,
        last_line=first_line + len(lines) - 1,
    )


def show_source(obj: Any, *, docstring: bool = True) -> None:
    """Display the source code of ``obj``, syntax-highlighted in a notebook.

    In Jupyter (and in the built book) the code appears as a highlighted Python
    block under a line that says which file and lines it comes from. Outside
    IPython it is printed as plain text.

    Args:
        obj: see :func:`get_source`.
        docstring: see :func:`get_source`.

    Returns:
        None. Use :func:`get_source` to get the text itself.

    Raises:
        TypeError: if ``obj`` has no Python source (see :func:`get_source`).
    """
    source = get_source(obj, docstring=docstring)
    shell = None
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # pragma: no cover - IPython comes with Jupyter
        pass
    if shell is None:
        print(source)
        return
    from IPython.display import display

    display(source)


# ---------------------------------------------------------------------------
# Chinese text in figures
# ---------------------------------------------------------------------------


def use_cjk_font() -> str:
    """Let matplotlib draw Chinese characters, with the font bundled in ``course_lib``.

    Registers :data:`CJK_FONT_FILE` (a subset of Noto Sans SC: every character
    of the course's Chinese data and of GB2312) with matplotlib *by file path*,
    so it needs no system font and no rebuild of matplotlib's font cache, and
    appends its family to ``matplotlib.rcParams["font.family"]``, e.g.
    ``["sans-serif"]`` becomes ``["sans-serif", "Noto Sans SC"]``. matplotlib
    (>= 3.6) takes each character from the first family in that list that has
    it: Latin text keeps DejaVu Sans (or whatever families were set before)
    and only the characters missing there come from the bundled font.

    That ``rcParams`` entry is the only global state it changes. Calling it
    again changes nothing. Text objects made *before* the call keep their old
    fonts, so call it before drawing: the plotting helpers of this module do
    so, and a chapter that draws Chinese text with plain matplotlib calls it
    once in its set-up cell. Call it again after ``plt.rcdefaults()`` or
    ``plt.style.use(...)``, which reset ``font.family``.

    Returns:
        The family name of the bundled font (``"Noto Sans SC"``), for
        ``fontfamily=`` arguments.

    Raises:
        FileNotFoundError: the font file is missing (an incomplete install of
            ``course_lib``).
    """
    import matplotlib
    from matplotlib import font_manager

    path = os.fspath(CJK_FONT_FILE)
    manager = font_manager.fontManager
    entry = next((f for f in manager.ttflist if f.fname == path), None)
    if entry is None:
        if not CJK_FONT_FILE.is_file():
            raise FileNotFoundError(
                f"the Chinese font of course_lib is missing: {path} "
                "(reinstall the package; course_book/fonts/README.md says how the file is made)"
            )
        manager.addfont(path)
        entry = next(f for f in manager.ttflist if f.fname == path)
    families = list(matplotlib.rcParams["font.family"])
    if entry.name not in families:
        matplotlib.rcParams["font.family"] = [*families, entry.name]
    return entry.name


# ---------------------------------------------------------------------------
# Heatmaps
# ---------------------------------------------------------------------------


def _as_2d_array(matrix: Any):
    """Convert a tensor, array or nested list to a 2-D numpy array."""
    import numpy as np

    if hasattr(matrix, "detach"):  # a torch tensor, without importing torch
        matrix = matrix.detach().cpu()
        if str(matrix.dtype) in ("torch.bfloat16", "torch.float16"):
            matrix = matrix.float()
        matrix = matrix.numpy()
    array = np.asarray(matrix)
    if array.ndim != 2:
        raise ValueError(
            f"plot_heatmap needs a 2-D matrix, got shape {tuple(array.shape)}; "
            "select one (e.g. weights[0, head] for attention of shape "
            "(batch, n_heads, q_len, k_len))"
        )
    if array.dtype.kind not in "biuf":
        raise ValueError(f"plot_heatmap needs numbers or booleans, got dtype {array.dtype}")
    return array


def _too_wide(ax, texts: Sequence[str]) -> bool:
    """Whether the labels, written side by side, are wider than the axes (a rough width per character)."""
    import matplotlib

    fig = ax.get_figure()
    axes_width = ax.get_position().width * fig.get_figwidth() * 72  # points
    size = matplotlib.rcParams["xtick.labelsize"]
    size = size if isinstance(size, (int, float)) else matplotlib.rcParams["font.size"]
    return sum(len(t) + 1 for t in texts) * 0.6 * size > axes_width


def plot_heatmap(
    matrix: Any,
    x_labels: Sequence[Any] | None = None,
    y_labels: Sequence[Any] | None = None,
    title: str | None = None,
    ax: Any = None,
    *,
    xlabel: str | None = None,
    ylabel: str | None = None,
    cmap: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
    fmt: str = "{:.2f}",
    colorbar: bool = True,
):
    """Draw a matrix as a heatmap: attention weights, masks, positional encodings.

    Row ``i`` is drawn at the top for ``i = 0`` (matrix layout). For attention,
    pass the queries as rows (``y_labels``) and the keys as columns
    (``x_labels``). A boolean mask is drawn in two colours with a
    ``False``/``True`` colour bar (``True`` = may attend, the course convention).

    Args:
        matrix: a 2-D torch tensor (any device/dtype), numpy array or nested
            list of numbers or booleans.
        x_labels: one label per column (e.g. key tokens), or ``None``.
        y_labels: one label per row (e.g. query tokens), or ``None``.
        title: the axes title.
        ax: a matplotlib ``Axes`` to draw on; ``None`` creates a new figure
            sized to the matrix.
        xlabel: the x-axis label (e.g. ``"key"``).
        ylabel: the y-axis label (e.g. ``"query"``).
        cmap: a matplotlib colormap name; default ``"viridis"``, and
            ``"Blues"`` for boolean matrices.
        vmin: the value mapped to the lowest colour (default: the minimum;
            0 for booleans).
        vmax: the value mapped to the highest colour (default: the maximum;
            1 for booleans).
        annotate: write each value in its cell (for small matrices).
        fmt: the format of annotated values, e.g. ``"{:.1f}"``.
        colorbar: add a colour bar.

    Labels may hold Chinese characters: it calls :func:`use_cjk_font` first
    (and gives its labels that font even on an ``ax`` made before).

    Returns:
        The matplotlib ``Axes`` drawn on. In a notebook, assign it
        (``ax = plot_heatmap(...)``) rather than ending the line with ``;``:
        nbval runs cells without recording them in IPython's history, and then
        IPython ignores the ``;`` and prints the ``Axes`` repr.

    Raises:
        ValueError: if the matrix is not 2-D or not numeric, or if the number of
            labels does not match its shape.
    """
    import matplotlib.pyplot as plt

    use_cjk_font()
    font = {"fontfamily": list(plt.rcParams["font.family"])}  # also for an ax made before the call
    array = _as_2d_array(matrix)
    n_rows, n_cols = array.shape
    if x_labels is not None and len(x_labels) != n_cols:
        raise ValueError(f"x_labels has {len(x_labels)} labels for {n_cols} columns")
    if y_labels is not None and len(y_labels) != n_rows:
        raise ValueError(f"y_labels has {len(y_labels)} labels for {n_rows} rows")

    is_bool = array.dtype.kind == "b"
    if is_bool:
        array = array.astype(float)
        cmap = cmap or "Blues"
        vmin = 0.0 if vmin is None else vmin
        vmax = 1.0 if vmax is None else vmax
    cmap = cmap or "viridis"

    if ax is None:
        width = min(12.0, max(3.0, 0.45 * n_cols + 1.5))
        height = min(10.0, max(2.5, 0.45 * n_rows + 1.0))
        _, ax = plt.subplots(figsize=(width, height), layout="constrained")

    colormap = plt.get_cmap(cmap, 2) if is_bool else plt.get_cmap(cmap)
    image = ax.imshow(
        array, cmap=colormap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest"
    )

    def set_ticks(labels, count, axis):
        if labels is None:
            return
        positions = list(range(count))
        texts = [str(label) for label in labels]
        if axis == "x":
            rotate = 90 if max((len(t) for t in texts), default=0) > 3 or _too_wide(ax, texts) else 0
            ax.set_xticks(positions, texts, rotation=rotate, **font)
        else:
            ax.set_yticks(positions, texts, **font)

    set_ticks(x_labels, n_cols, "x")
    set_ticks(y_labels, n_rows, "y")
    if xlabel:
        ax.set_xlabel(xlabel, **font)
    if ylabel:
        ax.set_ylabel(ylabel, **font)
    if title:
        ax.set_title(title, **font)

    if annotate:
        for i in range(n_rows):
            for j in range(n_cols):
                value = array[i, j]
                red, green, blue, _ = image.cmap(image.norm(value))
                dark_cell = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
                text = ("T" if value else "F") if is_bool else fmt.format(value)
                ax.text(j, i, text, ha="center", va="center", fontsize=8,
                        color="white" if dark_cell else "black")

    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax)
        if is_bool:
            low, high = image.get_clim()
            quarter = (high - low) / 4
            bar.set_ticks([low + quarter, high - quarter], labels=["False", "True"])
    return ax


# ---------------------------------------------------------------------------
# Widgets
# ---------------------------------------------------------------------------


def _figure_of(result: Any):
    """The matplotlib figure a plotting function returned or drew on."""
    import matplotlib.pyplot as plt

    if result is not None:
        if hasattr(result, "savefig"):  # a Figure
            return result
        if hasattr(result, "figure") and hasattr(result.figure, "savefig"):  # an Axes
            return result.figure
    return plt.gcf()


def explorer_with_static(
    plot_fn: Callable[..., Any],
    static: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    /,
    **controls: Any,
):
    """Show static figures for fixed settings, then a live widget (the convention).

    First calls ``plot_fn(**settings)`` for each settings dict in ``static`` and
    displays each figure as an ordinary image - this is what the HTML book,
    a PDF or a notebook preview can always show. Then displays an
    ``ipywidgets.interactive`` built from ``plot_fn`` and ``controls`` for
    readers with a running kernel. Tag the cell ``nbval-ignore-output``.
    It calls :func:`use_cjk_font` first, so ``plot_fn`` may draw Chinese text.

    Example::

        explorer_with_static(
            draw_encoding,                      # draw_encoding(d_model, max_len)
            [dict(d_model=16, max_len=50), dict(d_model=64, max_len=50)],
            d_model=(8, 128, 8), max_len=ipywidgets.fixed(50),
        )

    Args:
        plot_fn: a function that draws one matplotlib figure from keyword
            arguments and returns the ``Figure``, an ``Axes`` or ``None`` (then
            the current figure is used).
        static: the keyword arguments of one static figure, or a list of them
            (one figure each). Must not be empty.
        **controls: the widget abbreviations of ``ipywidgets.interact``, e.g.
            ``n=(1, 10)``, ``kind=["a", "b"]``, ``flag=True``. As with
            ``interact``, a parameter of ``plot_fn`` that has a default and is
            not named here also gets a control; hold it with
            ``name=ipywidgets.fixed(value)``.

    Returns:
        The ``ipywidgets.interactive`` widget (already displayed), or ``None``
        when ipywidgets is not installed or ``controls`` is empty (then only
        the static figures are shown).

    Raises:
        ValueError: if ``static`` is empty.
        TypeError: if ``static`` is not a mapping or a sequence of mappings.
    """
    import matplotlib.pyplot as plt
    from IPython.display import display

    use_cjk_font()
    settings_list = [static] if isinstance(static, Mapping) else list(static)
    if not settings_list:
        raise ValueError("explorer_with_static needs at least one static setting")
    if not all(isinstance(s, Mapping) for s in settings_list):
        raise TypeError("static must be a dict of keyword arguments or a list of such dicts")

    for settings in settings_list:
        before = set(plt.get_fignums())
        figure = _figure_of(plot_fn(**settings))
        display(figure)
        plt.close(figure)
        for number in set(plt.get_fignums()) - before:  # stray figures
            plt.close(number)

    if not controls:
        return None
    try:
        import ipywidgets
    except ImportError:  # pragma: no cover - ipywidgets is a course dependency
        return None

    @functools.wraps(plot_fn)  # the widget reads plot_fn's signature and defaults
    def live(**kwargs):
        result = plot_fn(**kwargs)
        if result is not None and hasattr(result, "savefig"):
            display(result)
            plt.close(result)
        else:
            plt.show()

    widget = ipywidgets.interactive(live, **controls)
    display(widget)
    return widget
