"""The Chinese edition's catalogs: extract, update, check, build.

The prose of the book is translated through gettext catalogs, one per page,
in ``locales/zh_CN/LC_MESSAGES/book/<page>.po``; the words drawn in figures,
explorers and quizzes and the figures' alternative text through one more
catalog, ``locales/zh_CN/LC_MESSAGES/outputs.po``. Code, outputs and figures
come from the same executed notebooks for both editions.

Usage (from the repository root, with the course's Python):

    .venv/bin/python scripts/i18n.py update   # after editing English text: refresh the .po files
    .venv/bin/python scripts/i18n.py check    # the drift gate (make test): untranslated, fuzzy, lost markup, stale figures
    .venv/bin/python scripts/i18n.py terms    # the glossary's Chinese terms used (locales/zh_CN/terms.yml)
    .venv/bin/python scripts/i18n.py preview --out DIR   # Chinese book from the committed outputs, strict
    .venv/bin/python scripts/i18n.py stat     # counts per file
    .venv/bin/python scripts/i18n.py build    # the Chinese book at _build/html/zh (make book, after the English)
    .venv/bin/python scripts/i18n.py extract --out DIR   # only the .pot templates

``update`` extracts the messages (a gettext build of the book without
executing it, plus the output strings recorded in the notebooks) into
``_build/gettext`` and merges them into the .po files with ``sphinx-intl``:
new entries are empty, changed ones are marked fuzzy. Translate them (an
editor such as Poedit, or by hand), remove the ``#, fuzzy`` flags, and run
``check``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANGUAGE = "zh_CN"
LOCALES = ROOT / "locales"
CATALOGS = LOCALES / LANGUAGE / "LC_MESSAGES"
OUTPUTS_DOMAIN = "outputs"
ZH_DIR = "zh"  # the Chinese edition is at _build/html/zh/

sys.path.insert(0, str(ROOT))


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _book_config(kind: str) -> dict:
    """_config.yml with absolute paths, for a build whose config file is elsewhere."""
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    sphinx = config.setdefault("sphinx", {})
    sphinx["local_extensions"] = {k: str(ROOT / v) for k, v in sphinx.get("local_extensions", {}).items()}
    cfg = sphinx.setdefault("config", {})
    cfg["html_static_path"] = [str(ROOT / p) for p in cfg.get("html_static_path", [])]
    if kind == "gettext":
        config["execute"]["execute_notebooks"] = "off"
        cfg.pop("html_static_path", None)  # (not needed, and the vendored JavaScript may be absent)
        config["execute"]["stderr_output"] = "remove"  # only the markdown matters here; outputs are checked elsewhere
    if kind == "zh-preview":  # (the vendored JavaScript is made by scripts/vendor_js.sh; a preview does without)
        cfg["html_static_path"] = [p for p in cfg.get("html_static_path", []) if Path(p).exists()]
    if kind in ("zh", "zh-preview"):
        if kind == "zh":
            config["execute"]["execute_notebooks"] = "cache"
            config["execute"]["cache"] = str(ROOT / "_build" / ".jupyter_cache")  # the English build's
        else:  # the committed outputs, nothing executed: a quick look at the translations
            config["execute"]["execute_notebooks"] = "off"
        config["title"] = "亲手构建 Transformer"
        cfg["language"] = LANGUAGE
        cfg["locale_dirs"] = [str(LOCALES)]
        overrides = cfg.setdefault("nb_mime_priority_overrides", [])
        from course_book.i18n import MIME_TYPE

        overrides.append(["html", MIME_TYPE, 1])
        theme = cfg.setdefault("html_theme_options", {})
        theme["search_bar_text"] = "搜索本书……"
        # MyST-NB's button of a hidden cell ({type} is "source" or "outputs": only "source" is hidden in this book)
        cfg["nb_code_prompt_show"] = "显示代码"
        cfg["nb_code_prompt_hide"] = "隐藏代码"
    return config


def _write_config(kind: str, folder: Path) -> Path:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "_config.yml"
    path.write_text(yaml.safe_dump(_book_config(kind), allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def extract(out: Path) -> Path:
    """Write the .pot templates (pages and outputs) into ``out``; return it."""
    with tempfile.TemporaryDirectory() as tmp:
        config = _write_config("gettext", Path(tmp))
        build = Path(tmp) / "build"
        proc = subprocess.run(
            [_bin("jupyter-book"), "build", str(ROOT), "--config", str(config), "--path-output", str(build),
             "--builder", "custom", "--custom-builder", "gettext", "-W", "--keep-going"],
            capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            raise SystemExit("the gettext build of the book failed (see above)")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(build / "_build" / "gettext", out)
    from course_book.i18n import output_messages, write_pot

    write_pot(output_messages(sorted((ROOT / "book").glob("*.ipynb"))), out / f"{OUTPUTS_DOMAIN}.pot")
    return out


def update() -> None:
    pot = extract(ROOT / "_build" / "gettext")
    subprocess.run([_bin("sphinx-intl"), "update", "-p", str(pot), "-d", str(LOCALES), "-l", LANGUAGE,
                    "--line-width", "-1", "--no-obsolete"], check=True)
    print(f"Updated the catalogs in {CATALOGS.relative_to(ROOT)}; translate the new and fuzzy entries, "
          "then run: python scripts/i18n.py check")


def check() -> int:
    """The drift gate: every current message has a translation that is not fuzzy, keeps the
    English's markup, and the notebooks' Chinese outputs were drawn with the current translations."""
    from course_book.i18n import Catalog, catalog_problems, stale_outputs

    with tempfile.TemporaryDirectory() as tmp:
        pot = extract(Path(tmp) / "gettext")
        problems = catalog_problems(pot, CATALOGS)
    markup = markup_problems(CATALOGS)
    stale = stale_outputs(sorted((ROOT / "book").glob("*.ipynb")), Catalog.load(CATALOGS / f"{OUTPUTS_DOMAIN}.po"))
    if not problems and not markup and not stale:
        print(f"All catalogs in {CATALOGS.relative_to(ROOT)} are complete: no untranslated or fuzzy entry, "
              "markup kept, the notebooks' Chinese figures drawn with the current translations.")
        return 0
    py = ".venv/bin/python"
    if problems:
        print("The Chinese edition is out of date with the English text:")
        for path, counts in problems.items():
            print(f"  {Path(path).relative_to(ROOT)}: " + ", ".join(f"{n} {what}" for what, n in counts.items() if n))
        print(f"To fix: {py} scripts/i18n.py update   (merges the new English text into the .po files),\n"
              "then translate the empty entries and the ones marked '#, fuzzy' (remove the flag), and check again.")
    if markup:
        print("Translations that lose the English's markup (a reference, code, math, a link, or bold/italic that does not parse):")
        for line in markup:
            print(f"  {line}")
    if stale:
        print("Notebooks whose Chinese figures, explorers or quizzes were drawn before their current translations:")
        for path, msgids in stale.items():
            print(f"  {Path(path).relative_to(ROOT)}: {len(msgids)} (e.g. {msgids[0][:60]!r})")
        print("To fix: re-execute them (cd book && ../.venv/bin/jupyter nbconvert --to notebook --execute --inplace "
              "NN_name.ipynb) and commit the outputs.")
    return 1


def _markup_pieces(text: str) -> list[tuple[str, str]]:
    """(kind, piece) for each role (its name and target: the shown text may be translated),
    inline code span, math segment and link address of a MyST paragraph."""
    import re

    pieces = []

    def role(match: re.Match) -> str:
        name, content = match.group(1), match.group(2)
        target = re.search(r"<([^<>]+)>\s*$", content)
        pieces.append(("a reference", f"{{{name}}} {target.group(1) if target else content}"))
        return " "

    text = re.sub(r"\{([a-z:]+)\}`([^`]*)`", role, text)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]+\$", lambda m: pieces.append(("math", m.group(0))) or " ", text, flags=re.S)
    text = re.sub(r"`[^`]+`", lambda m: pieces.append(("inline code", m.group(0))) or " ", text)
    pieces += [("a link address", m) for m in re.findall(r"\]\(([^)]*)\)", text)]
    return pieces


_WORDS_IN_MATH = r"(?<![_^])(?<![_^]\{)\\text\{([^{}]*)\}"
"""``\\text{...}`` on the baseline of a formula: words (``\\text{number of keys}``), which a
translation may put into Chinese. In a sub- or superscript (``d_\\text{model}``) it is a name."""


def _math_matches(english: str, chinese: str) -> bool:
    """Whether the math segment ``chinese`` keeps ``english``: equal character for character,
    except that the words of a baseline ``\\text{...}`` may be replaced by Chinese ones."""
    import re

    if english == chinese:
        return True
    en_words, zh_words = re.findall(_WORDS_IN_MATH, english), re.findall(_WORDS_IN_MATH, chinese)
    skeleton = lambda text: re.sub(_WORDS_IN_MATH, r"\\text{}", text)  # noqa: E731
    cjk = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")
    return (skeleton(english) == skeleton(chinese) and len(en_words) == len(zh_words)
            and all(e == z or cjk.search(z) for e, z in zip(en_words, zh_words)))


def markup_problems(catalogs: Path = CATALOGS) -> list[str]:
    """Entries of the page catalogs whose translation drops a piece of the English's markup
    (role, inline code, math, link address) or whose bold/italic does not parse as the English's.

    A formula must be the English's character for character, except the words of a
    ``\\text{...}`` on its baseline, which may be Chinese (:func:`_math_matches`)."""
    import re

    from babel.messages.pofile import read_po
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")

    def emphasis(text: str) -> tuple[int, int, bool]:
        bare = re.sub(r"\$\$.*?\$\$|\$[^$]+\$|`[^`]*`", "X", text, flags=re.S)
        html = md.renderInline(bare)
        return html.count("<strong>"), html.count("<em>"), "**" in re.sub(r"<[^>]+>", "", html)

    found = []
    for po_path in sorted((catalogs / "book").glob("*.po")):
        with po_path.open("rb") as f:
            po = read_po(f)
        for m in po:
            if not m.id or not isinstance(m.string, str) or not m.string.strip() or m.fuzzy:
                continue
            english, chinese = _markup_pieces(m.id), _markup_pieces(m.string)
            zh_math = [piece for what, piece in chinese if what == "math"]
            lost = [what for what, piece in set(english)
                    if (chinese.count((what, piece)) if what != "math" else sum(_math_matches(piece, z) for z in zh_math))
                    < english.count((what, piece))]
            en, zh = emphasis(m.id), emphasis(m.string)
            if zh[2] and not en[2]:
                lost.append("bold that does not parse (literal **)")
            elif zh[:2] != en[:2]:
                lost.append(f"bold/italic spans {zh[:2]} instead of {en[:2]}")
            if lost:
                found.append(f"{po_path.name}: {sorted(set(lost))} in the translation of {m.id[:80]!r}")
    return found


def stat() -> None:
    subprocess.run([_bin("sphinx-intl"), "stat", "-d", str(LOCALES), "-l", LANGUAGE], check=True)


def build() -> None:
    """The Chinese book at _build/html/zh, from the English build's execution cache."""
    html = ROOT / "_build" / "html"
    if not (ROOT / "_build" / ".jupyter_cache").exists():
        raise SystemExit("build the English book first (make book): the Chinese one reuses its executed notebooks")
    with tempfile.TemporaryDirectory() as tmp:
        config = _write_config("zh", Path(tmp))
        build_dir = ROOT / "_build" / "zh_build"
        cmd = [_bin("jupyter-book"), "build", str(ROOT), "--config", str(config), "--path-output", str(build_dir),
               "-W", "--keep-going"]
        env = dict(os.environ, COURSE_BOOK_LANGUAGE=LANGUAGE)
        subprocess.run(cmd, check=True, env=env)
    target = html / ZH_DIR
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(build_dir / "_build" / "html"), target)
    shutil.rmtree(build_dir, ignore_errors=True)
    print(f"Chinese edition: {target.relative_to(ROOT)}/index.html")


# --- the term base: the glossary's Chinese column --------------------------------

TERMS_FILE = LOCALES / LANGUAGE / "terms.yml"


def glossary_terms() -> list[tuple[str, list[str]]]:
    """(English term, accepted Chinese forms) for each term of book/glossary.md's table.

    "causal mask (look-ahead mask) | 因果掩码（前瞻掩码）" gives two English terms,
    each accepting 因果掩码（前瞻掩码）, 因果掩码 and 前瞻掩码; "Post-LN / Pre-LN |
    后置层归一化 / 前置层归一化" pairs the halves; an ASCII name inside the
    Chinese one (BLEU in "BLEU 分数") is accepted too.
    """
    import re

    terms: list[tuple[str, list[str]]] = []
    for line in (ROOT / "book" / "glossary.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] in ("English", "") or set(cells[0]) <= set("-"):
            continue
        english, chinese = cells[0], cells[1]
        en_parts, zh_parts = english.split(" / "), chinese.split(" / ")
        pairs = list(zip(en_parts, zh_parts)) if len(en_parts) == len(zh_parts) else [(english, chinese)]
        for en, zh in pairs:
            forms = {zh}
            head, _, rest = zh.partition("（")
            forms.add(head.strip())
            if rest:
                forms.add(rest.rstrip("）").strip())
            forms.update(t for t in re.findall(r"[A-Za-z][A-Za-z0-9^_-]+", zh) if len(t) >= 2)
            en_head, _, en_rest = en.partition(" (")
            names = [en_head.strip()] + ([en_rest.rstrip(")").strip()] if en_rest else [])
            for name in names:
                terms.append((name, sorted(f for f in forms if f)))
    return terms


def d2l_names() -> list[tuple[str, str, str]]:
    """(English, the course's Chinese, 《动手学深度学习》's Chinese) for each row of the glossary's
    last table (three columns, so :func:`glossary_terms` does not read it)."""
    rows, inside = [], False
    for line in (ROOT / "book" / "glossary.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2] == "《动手学深度学习》":
            inside = True
        elif inside and len(cells) == 3 and not set(cells[0]) <= set("-"):
            rows.append((cells[0], cells[1], cells[2]))
        elif inside and not line.strip().startswith("|"):
            inside = False
    return rows


def _prose_only(text: str) -> str:
    """``text`` without inline code, math, roles' targets and link addresses."""
    import re

    text = re.sub(r"\{[a-z:]+\}`[^`]*`", " ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\$\$.*?\$\$|\$[^$]*\$", " ", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return text


_IDENTIFIER_TUPLE = r"\((?:[A-Za-z_][\w.]*|\{#\d+\}|\d+)(?:,\s*(?:[A-Za-z_][\w.]*|\{#\d+\}|\d+))+\)"


def _outputs_prose(text: str) -> str:
    """An ``outputs.po`` message without what is code there (it has no backticks): shape
    tuples such as ``(batch, q_len, k_len)``, ``name=`` arguments and dotted or
    underscored identifiers (``nn.Embedding``, ``seq_len``)."""
    import re

    text = re.sub(_IDENTIFIER_TUPLE, " ", text)
    text = re.sub(r"\b[A-Za-z_]\w*=", " ", text)
    return re.sub(r"\b[A-Za-z_]\w*(?:[._]\w+)+", " ", text)


def _term_regex(term: str):
    import re

    body = re.escape(term).replace(r"\ ", r"[\s-]+")
    plural = r"(?:s|es)?" if not term.endswith("y") else r"(?:s|es)?|" + re.escape(term[:-1]) + "ies"
    flags = 0 if any(c.isupper() for c in term) else re.I
    return re.compile(r"(?<![A-Za-z0-9_-])(?:" + body + plural + r")(?![A-Za-z0-9_])", flags)


D2L_GLOSS = r"《动手学深度学习》[^“”（）。；]{0,8}“[^”]*”"
"""A gloss with the name that 《动手学深度学习》 (d2l-zh) uses, e.g. （《动手学深度学习》称“强制教学”）:
the other book's name is quoted, so the ``avoid`` rules do not apply inside it."""


def _catalog_files(catalogs: Path) -> list[Path]:
    """The page catalogs and the outputs catalog (figures, explorers, quizzes, alternative text)."""
    files = sorted((catalogs / "book").glob("*.po"))
    outputs = catalogs / f"{OUTPUTS_DOMAIN}.po"
    return files + ([outputs] if outputs.exists() else [])


def _excepted(exceptions: list[dict], used: list[bool], key: str, value: str, name: str, english: str) -> bool:
    """Whether an exception (``key``: ``value``, file, a piece of the English) covers this entry;
    marks the exceptions that did."""
    hit = [i for i, e in enumerate(exceptions)
           if e.get(key) == value and e.get("file") in (name, "*") and str(e.get("contains", "")) in english]
    for i in hit:
        used[i] = True
    return bool(hit)


def term_problems(catalogs: Path = CATALOGS) -> tuple[list[str], list[str]]:
    """(problems, stale exceptions) of the term base, in the page catalogs and in ``outputs.po``.

    Two kinds of problem: an entry whose English uses a term (the glossary's, or one of
    ``terms`` in ``locales/zh_CN/terms.yml``) and whose Chinese uses none of its accepted
    forms; and an entry whose Chinese prose (outside code and math) uses a form that
    terms.yml's ``avoid`` lists (one concept, one name: 批量 where the book says 批次).

    terms.yml lists ``terms`` (English term: its Chinese forms, for names the book fixes
    outside the glossary), ``alternatives`` (term: more accepted Chinese forms),
    ``alternatives_in`` (file: term: more forms accepted in that file only), ``avoid``
    (a regular expression on the Chinese, the form to use instead, why, optionally the
    files it applies to) and ``exceptions``
    (``term`` or ``avoid``, file, a piece of the English message, why: the word is used in
    another sense there). An exception that matches nothing is reported as stale.
    """
    import re

    import yaml
    from babel.messages.pofile import read_po

    rules = yaml.safe_load(TERMS_FILE.read_text(encoding="utf-8")) if TERMS_FILE.exists() else {}
    alternatives = {k: list(v) for k, v in (rules.get("alternatives") or {}).items()}
    exceptions = list(rules.get("exceptions") or [])
    used = [False] * len(exceptions)
    base = glossary_terms() + [(t, list(forms)) for t, forms in (rules.get("terms") or {}).items()]
    terms = [(t, forms + alternatives.get(t, []), _term_regex(t)) for t, forms in base]
    local = {name: {k: list(v) for k, v in forms.items()} for name, forms in (rules.get("alternatives_in") or {}).items()}
    avoid = [(a["avoid"], re.compile(a["avoid"]), a.get("use", ""), a.get("files")) for a in rules.get("avoid") or []]
    term_cells = {t for t, _ in glossary_terms()}
    problems: list[str] = []
    for po_path in _catalog_files(catalogs):
        with po_path.open("rb") as f:
            po = read_po(f)
        name = po_path.name
        for message in po:
            if not message.id or not message.string or message.fuzzy:
                continue
            english = message.id if isinstance(message.id, str) else message.id[0]
            chinese = message.string if isinstance(message.string, str) else message.string[0]
            if chinese == english:
                continue  # kept as it is on purpose (a formula, a name)
            if name == "glossary.po" and (english in term_cells or english.split(" (")[0] in term_cells
                                          or " / " in english and english.split(" / ")[0] in term_cells):
                continue  # the table's English column stays English
            prose = _prose_only(english) if name != f"{OUTPUTS_DOMAIN}.po" else _outputs_prose(english)
            for term, forms, regex in terms:
                forms = forms + local.get(name, {}).get(term, [])
                if not regex.search(prose) or any(f in chinese for f in forms):
                    continue
                if not _excepted(exceptions, used, "term", term, name, english):
                    problems.append(f"{name}: {term!r} -> expected one of {forms} in the translation of: "
                                    f"{english[:100]!r}")
            chinese_prose = re.sub(D2L_GLOSS, " ", _prose_only(chinese))
            for pattern, regex, use, files in avoid:
                found = regex.search(chinese_prose) if files is None or name in files else None
                if found and not _excepted(exceptions, used, "avoid", pattern, name, english):
                    problems.append(f"{name}: {found.group(0)!r} -> the book says {use!r} in the translation of: "
                                    f"{english[:100]!r}")
    stale = [f"{e}" for e, u in zip(exceptions, used) if not u]
    return problems, stale


def d2l_problems(catalogs: Path = CATALOGS) -> list[str]:
    """Names of 《动手学深度学习》 (the glossary's last table) that no translation glosses
    (``（《动手学深度学习》称“强制教学”）``): each belongs where the book first uses the term."""
    import re

    from babel.messages.pofile import read_po

    glossed = []
    for po_path in _catalog_files(catalogs):
        with po_path.open("rb") as f:
            glossed += [m.group(0) for message in read_po(f) if isinstance(message.string, str) and not message.fuzzy
                        for m in re.finditer(D2L_GLOSS, message.string)]
    text = " ".join(glossed)
    return [f"no translation glosses {english!r} with 《动手学深度学习》's name “{other}” (the glossary's last "
            "table): add it where the book first uses the term" for english, _, other in d2l_names()
            if f"“{other}”" not in text]


def preview(out: Path) -> int:
    """The Chinese book from the committed outputs (nothing executed) at ``out``: to check translations."""
    with tempfile.TemporaryDirectory() as tmp:
        config = _write_config("zh-preview", Path(tmp))
        cmd = [_bin("jupyter-book"), "build", str(ROOT), "--config", str(config), "--path-output", str(out),
               "-W", "--keep-going"]
        rc = subprocess.run(cmd).returncode
    print(f"Chinese preview: {out}/_build/html/index.html (exit {rc})")
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("update", "check", "stat", "build", "extract", "terms", "preview"))
    parser.add_argument("--out", type=Path, default=None,
                        help="extract: where the .pot files go (_build/gettext); preview: the output folder (_build/zh_preview)")
    args = parser.parse_args(argv)
    if args.command == "update":
        update()
    elif args.command == "check":
        return check()
    elif args.command == "stat":
        stat()
    elif args.command == "build":
        build()
    elif args.command == "preview":
        return preview(args.out or ROOT / "_build" / "zh_preview")
    elif args.command == "terms":
        problems, stale = term_problems()
        problems += d2l_problems()
        for p in problems:
            print(p)
        for e in stale:
            print(f"stale exception in {TERMS_FILE.relative_to(ROOT)}: {e}")
        print(f"{len(problems)} term problems, {len(stale)} stale exceptions")
        return 1 if problems or stale else 0
    else:
        print(extract(args.out or ROOT / "_build" / "gettext"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
