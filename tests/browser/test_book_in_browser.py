"""The built book as a reader's browser shows it: headless Chromium, offline.

Run after the book is built (``make book``); a stage of ``make test``::

    pytest tests/browser --html-dir _build/html

Every page of the book is opened from a local server with every other host
made unresolvable. The checks:

* no request leaves the page's own origin, and nothing it asks for is missing;
* no error in the browser console;
* every explorer (``course_book.explorers``) draws its chart, and moving each
  of its controls redraws its marks (bars, cells, lines, points: a caption
  that changes over unchanged marks does not count);
* formulas are typeset (MathJax output present where the page has math);
* every concept check (``course_book.quiz``) draws its questions; a click on
  each multiple-choice answer shows that answer's explanation, a typed number
  (Enter) its feedback; jupyterquiz is loaded only on pages with a quiz, from
  the book itself;
* at 400 px the page is no wider than the screen.

Needs Chromium, its driver (Debian: ``apt-get install -y chromium
chromium-driver``) and ``selenium``. Without them the tests are skipped with
the reason — unless ``REQUIRE_BROWSER=1`` (set by ``.ci/run`` once it has
installed Chromium), which turns a missing browser into a failure.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Console messages that are not the book's fault: the theme's own notice when no
# colour mode was stored yet, and the favicon the book does not have.
IGNORED_CONSOLE = (
    re.compile(r"Got invalid theme mode"),
    re.compile(r"favicon\.ico"),
)


def _missing_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "Chromium is not installed (apt-get install -y chromium)"
    if not shutil.which("chromedriver"):
        return "chromedriver is not installed (apt-get install -y chromium-driver)"
    return None


@pytest.fixture(scope="session")
def html_dir(request) -> Path:
    path = Path(request.config.getoption("--html-dir")).resolve()
    if not (path / "index.html").exists():
        pytest.fail(f"no built book at {path}: run `make book` first")
    return path


class _Server:
    """Serves the built book on 127.0.0.1 and records what was asked for and what was missing."""

    def __init__(self, directory: Path) -> None:
        self.missing: list[str] = []
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format, *args):  # noqa: A002
                pass

            def send_error(self, code, message=None, explain=None):
                if code == 404 and self.path != "/favicon.ico":  # asked for by every browser
                    server.missing.append(self.path)
                super().send_error(code, message, explain)

        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(directory))
        )
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()


@pytest.fixture(scope="session")
def server(html_dir):
    s = _Server(html_dir)
    yield s
    s.close()


@pytest.fixture(scope="session")
def browser():
    reason = _missing_browser()
    if reason:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                 "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking",
                 # offline: no host but the local server resolves
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _pages(html_dir: Path) -> list[str]:
    return sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                  if "_static" not in p.parts and p.name not in {"genindex.html", "search.html"})


def _open(browser, server, page: str, width: int = 1400) -> None:
    # the viewport itself (Chromium's windows are at least 500 px wide)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    browser.get_log("browser")
    browser.get_log("performance")
    browser.get(f"{server.origin}/{page}")
    browser.execute_script("return document.readyState")
    # MathJax and the explorers draw after load; wait for both to settle
    browser.execute_async_script(
        """const done = arguments[arguments.length - 1];
        const ready = () => (!window.MathJax || !MathJax.startup || !MathJax.startup.promise)
            ? Promise.resolve() : MathJax.startup.promise;
        ready().then(() => setTimeout(done, 800)).catch(() => done());"""
    )


def _requests(browser) -> list[str]:
    urls = []
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _console_errors(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser")
            if e["level"] == "SEVERE" and not any(p.search(e["message"]) for p in IGNORED_CONSOLE)]


def test_every_page_stays_offline_and_logs_no_error(browser, server, html_dir):
    problems = []
    for page in _pages(html_dir):
        _open(browser, server, page)
        foreign = [u for u in _requests(browser) if not u.startswith((server.origin, "data:", "blob:", "about:"))]
        errors = _console_errors(browser)
        if foreign:
            problems.append(f"{page}: requests to other hosts: {foreign[:3]}")
        if errors:
            problems.append(f"{page}: console errors: {errors[:3]}")
    if server.missing:
        problems.append(f"files asked for but missing: {sorted(set(server.missing))[:10]}")
    assert not problems, "\n".join(problems)


def test_every_image_has_alternative_text(html_dir):
    # no browser needed: the built pages themselves
    bad = []
    for page in _pages(html_dir):
        for alt, src in re.findall(r'<img[^>]*?alt="([^"]*)"[^>]*?src="([^"]*)"', (html_dir / page).read_text(encoding="utf-8")):
            if "_images/" in src and (len(alt) < 20 or alt.lower().endswith((".png", ".svg"))):
                bad.append(f"{page}: {src} alt={alt!r}")
    assert not bad, "images without alternative text:\n" + "\n".join(bad[:20])


def test_formulas_are_typeset(browser, server, html_dir):
    untypeset = []
    for page in _pages(html_dir):
        source = (html_dir / page).read_text(encoding="utf-8")
        if 'class="math' not in source:
            continue
        _open(browser, server, page)
        if not browser.find_elements("css selector", "mjx-container"):
            untypeset.append(page)
    assert not untypeset, f"formulas left as TeX on {untypeset}"


_SET_CONTROL = """
// set a control to a value (a select: an option index; a range: a number; a checkbox: a bool)
const [input, value] = [arguments[0], arguments[1]];
if (input.tagName === 'SELECT') { input.selectedIndex = value; }
else if (input.type === 'range') { input.value = value; }
else { input.checked = value; }
input.dispatchEvent(new Event('input', {bubbles: true}));
input.dispatchEvent(new Event('change', {bubbles: true}));
"""

_OTHER_VALUES = """
// the values a control can be set to, other than its current one
const input = arguments[0];
if (input.tagName === 'SELECT') { return Array.from(input.options, (o, i) => i).filter(i => i !== input.selectedIndex); }
if (input.type === 'range') { return [input.min, input.max].filter(v => Number(v) !== Number(input.value)); }
return [!input.checked];
"""


_MARKS = """
// the chart's marks (bars, cells, lines, points; not its text): their geometry and colour
const marks = arguments[0].querySelectorAll('svg g[class*="mark-"]:not(.mark-text) path');
return Array.from(marks, m => (m.getAttribute('d') || '') + (m.getAttribute('fill') || '')
                              + (m.getAttribute('transform') || '')).join('|');
"""


def _chart_state(browser, explorer) -> str:
    return browser.execute_script(_MARKS, explorer)


def _controls(explorer) -> list:
    """The explorer's controls: each select, range and checkbox, and one radio button per group."""
    found, groups = [], set()
    for control in explorer.find_elements("css selector", ".vega-bindings select, .vega-bindings input"):
        if control.get_attribute("type") == "radio":
            if control.get_attribute("name") in groups:
                continue
            groups.add(control.get_attribute("name"))
        found.append(control)
    return found


def _responds(browser, explorer, control) -> bool:
    """Whether setting ``control`` to one of its other values changes the chart's marks."""
    if control.get_attribute("type") == "radio":
        group = explorer.find_elements("css selector", f'input[name="{control.get_attribute("name")}"]')
        control = next((c for c in group if not c.is_selected()), group[0])
        values = [True]
    else:
        values = browser.execute_script(_OTHER_VALUES, control)
    before = _chart_state(browser, explorer)
    for value in values:
        browser.execute_script(_SET_CONTROL, control, value)
        browser.execute_async_script("setTimeout(arguments[arguments.length - 1], 200)")
        if _chart_state(browser, explorer) != before:
            return True
    return False


def _explorer(browser, server, page: str, n: int):
    _open(browser, server, page)
    explorer = browser.find_elements("css selector", ".course-explorer")[n]
    return explorer, _controls(explorer)


def test_every_explorer_redraws_when_a_control_moves(browser, server, html_dir):
    # Every control must change the marks from the page's start: a reader's first move of any
    # control shows something (a sampling seed starts on a sampling strategy, not on greedy search;
    # course_book.explorers refuses an explorer whose control changes nothing from its start).
    pages = [p for p in _pages(html_dir) if 'class="course-explorer"' in (html_dir / p).read_text(encoding="utf-8")]
    if not pages:
        pytest.skip("the book has no explorer")
    problems = []
    for page in pages:
        _open(browser, server, page)
        for n in range(len(browser.find_elements("css selector", ".course-explorer"))):
            explorer, controls = _explorer(browser, server, page, n)
            if not _chart_state(browser, explorer):
                problems.append(f"{page} explorer {n}: no chart drawn")
                continue
            if not controls:
                problems.append(f"{page} explorer {n}: no controls")
            for k in range(len(controls)):
                explorer, controls = _explorer(browser, server, page, n)  # the page's start again
                if not _responds(browser, explorer, controls[k]):
                    name = controls[k].get_attribute("name") or str(k)
                    problems.append(f"{page} explorer {n}: control {name!r} did not redraw the chart from the page's start")
    assert not problems, "\n".join(problems)


def test_pages_fit_a_phone_screen(browser, server, html_dir):
    too_wide = []
    for page in _pages(html_dir):
        _open(browser, server, page, width=400)
        inner = browser.execute_script("return window.innerWidth")
        scroll = browser.execute_script("return document.documentElement.scrollWidth")
        if scroll > inner + 1:
            too_wide.append(f"{page}: {scroll} px wide in a {inner} px window")
    assert not too_wide, "\n".join(too_wide)


def _quiz_pages(html_dir: Path) -> list[str]:
    return [p for p in _pages(html_dir) if 'class="course-quiz"' in (html_dir / p).read_text(encoding="utf-8")]


def test_jupyterquiz_is_loaded_only_where_a_quiz_is(html_dir):
    # no browser needed: the script tags of the built pages
    quiz_pages = set(_quiz_pages(html_dir))
    if not quiz_pages:
        pytest.skip("the book has no concept check")
    problems = []
    for page in _pages(html_dir):
        source = (html_dir / page).read_text(encoding="utf-8")
        loads = "vendor/jupyterquiz/jupyterquiz.js" in source and "course_quiz.js" in source
        if loads != (page in quiz_pages):
            problems.append(f"{page}: quiz {'present' if page in quiz_pages else 'absent'}, jupyterquiz "
                            f"{'loaded' if loads else 'not loaded'}")
        if "function show_questions" in source:
            problems.append(f"{page}: jupyterquiz's library is inlined (the notebook's JavaScript output was not dropped)")
    assert (html_dir / "_static" / "vendor" / "jupyterquiz" / "jupyterquiz.js").is_file(), "jupyterquiz.js was not written"
    assert not problems, "\n".join(problems)


_CLICK_ANSWER = """
// click answer i of the multiple-choice question q; return the feedback shown
const [quiz, q, i] = [arguments[0], arguments[1], arguments[2]];
const question = quiz.querySelectorAll('.Quiz')[q];
const label = question.querySelectorAll('label.MCButton')[i];
label.querySelector('span').click();
const fb = question.querySelector('.Feedback');
return [label.innerText, label.dataset.feedback || '', fb ? fb.innerText : '', fb ? fb.className : ''];
"""

_TYPE_NUMBER = """
// type a number into numeric question q, press Enter; return the feedback shown
const [quiz, q, value] = [arguments[0], arguments[1], arguments[2]];
const question = quiz.querySelectorAll('.Quiz')[q];
const input = question.querySelector('input');
input.value = value;
input.dispatchEvent(new KeyboardEvent('keypress', {keyCode: 13, which: 13, key: 'Enter', bubbles: true}));
const fb = question.querySelector('.Feedback');
return [fb ? fb.innerText : '', fb ? fb.className : '', input.dataset.answers];
"""


def test_every_quiz_shows_its_questions_and_explains_each_answer(browser, server, html_dir):
    pages = _quiz_pages(html_dir)
    if not pages:
        pytest.skip("the book has no concept check")
    problems = []
    for page in pages:
        _open(browser, server, page)
        quizzes = browser.find_elements("css selector", ".course-quiz")
        for n, quiz in enumerate(quizzes):
            questions = quiz.find_elements("css selector", ".Quiz")
            where = f"{page} quiz {n}"
            if not 3 <= len(questions) <= 5:
                problems.append(f"{where}: {len(questions)} questions drawn (3-5 expected)")
                continue
            if quiz.find_elements("css selector", ".course-quiz-fallback"):
                problems.append(f"{where}: the fallback text is still shown")
            for q, question in enumerate(questions):
                text = question.text
                if "$" in text or "\\(" in text:
                    problems.append(f"{where} question {q}: TeX left in the text: {text[:80]!r}")
                if page.startswith("zh/") and "answer here" in text:
                    problems.append(f"{where} question {q}: jupyterquiz's English label on a Chinese page")
                labels = question.find_elements("css selector", "label.MCButton")
                if labels:
                    for i in range(len(labels)):
                        answer, expected, shown, cls = browser.execute_script(_CLICK_ANSWER, quiz, q, i)
                        if not expected or " ".join(shown.split()) != " ".join(browser.execute_script(
                                "const d = document.createElement('div'); d.innerHTML = arguments[0]; return d.innerText;",
                                expected).split()):
                            problems.append(f"{where} question {q}: clicking {answer!r} showed {shown!r}, not its explanation")
                        if "correct" not in cls:
                            problems.append(f"{where} question {q}: feedback not marked right/wrong ({cls!r})")
                else:
                    answers = json.loads(browser.execute_script(_TYPE_NUMBER, quiz, q, "0")[2])
                    right = next(a for a in answers if a.get("correct"))
                    value = right["value"] if "value" in right else (right["range"][0] + right["range"][1]) / 2
                    shown, cls, _ = browser.execute_script(_TYPE_NUMBER, quiz, q, repr(value))
                    if not shown.strip() or "incorrect" in cls or "correct" not in cls:
                        problems.append(f"{where} question {q}: typing the answer {value!r} showed {shown!r} ({cls})")
                    shown, cls, _ = browser.execute_script(_TYPE_NUMBER, quiz, q, "123456789")
                    if not shown.strip() or "incorrect" not in cls:
                        problems.append(f"{where} question {q}: a wrong number showed {shown!r} ({cls})")
    assert not problems, "\n".join(problems)


def test_quiz_answers_are_shuffled(browser, server, html_dir):
    pages = _quiz_pages(html_dir)
    if not pages:
        pytest.skip("the book has no concept check")
    orders = set()
    for _ in range(6):
        _open(browser, server, pages[0])
        quiz = browser.find_element("css selector", ".course-quiz")
        orders.add(tuple(label.text for label in quiz.find_elements("css selector", "label.MCButton")))
    assert len(orders) > 1, f"{pages[0]}: the answers came in the same order on 6 loads"


# --- the Chinese edition (_build/html/zh, scripts/i18n.py build) ----------------

_CJK = re.compile(r"[\u4e00-\u9fff]")


def _zh_dir(html_dir: Path) -> Path:
    zh = html_dir / "zh"
    if not (zh / "index.html").exists():
        pytest.fail(f"no Chinese edition at {zh}: `make book` builds it (scripts/i18n.py build)")
    return zh


def _article_text(source: str) -> str:
    """The text of a page's article, without scripts, styles, code and outputs."""
    body = source.split('<article class="bd-article"', 1)[-1].split("</article>", 1)[0]
    body = re.sub(r"<(script|style|pre)\b.*?</\1>", " ", body, flags=re.S)
    body = re.sub(r'<div class="cell_output.*?</div>\s*</div>', " ", body, flags=re.S)
    body = re.sub(r"<code\b.*?</code>|<mjx-container\b.*?</mjx-container>", " ", body, flags=re.S)
    return re.sub(r"<[^>]+>", " ", body)


def test_every_page_has_its_chinese_twin_and_they_link_to_each_other(html_dir):
    zh = _zh_dir(html_dir)
    english = [p for p in _pages(html_dir) if not p.startswith("zh/")]
    problems = []
    for page in english:
        twin = zh / page
        if not twin.exists():
            problems.append(f"{page}: no Chinese page")
            continue
        en_src, zh_src = (html_dir / page).read_text(encoding="utf-8"), twin.read_text(encoding="utf-8")
        if re.search(r'http-equiv="refresh"', en_src, re.I):
            continue  # the root's redirect to the front page: no text of its own
        if '<html lang="zh-CN"' not in zh_src or '<html lang="en"' not in en_src:
            problems.append(f"{page}: lang attribute wrong")
        for src, base, want in ((en_src, html_dir / page, zh / page), (zh_src, twin, html_dir / page)):
            hrefs = re.findall(r'<p class="course-language"><a href="([^"]+)"', src)
            if not hrefs or (base.parent / hrefs[0]).resolve() != want.resolve():
                problems.append(f"{base.relative_to(html_dir)}: language link {hrefs[:1]} does not lead to {want.relative_to(html_dir)}")
    assert not problems, "\n".join(problems)


def test_chinese_pages_read_in_chinese(html_dir):
    """The article text of each Chinese page is mostly Chinese (code, math and outputs left aside)."""
    zh = _zh_dir(html_dir)
    thin = []
    for page in sorted(p for p in _pages(zh) if p.startswith("book/")):
        text = _article_text((zh / page).read_text(encoding="utf-8"))
        words = re.findall(r"[A-Za-z]{3,}", text)
        cjk = len(_CJK.findall(text))
        if cjk < 200 or len(words) > cjk / 3:
            thin.append(f"{page}: {cjk} Chinese characters, {len(words)} English words, e.g. {words[:12]}")
        source = (zh / page).read_text(encoding="utf-8")
        english_parts = [c for c in re.findall(r'caption-text">([^<]*)', source) if not _CJK.search(c)]
        if english_parts:
            thin.append(f"{page}: table of contents parts in English: {english_parts}")
        english_alt = [a for a in re.findall(r'<img[^>]*?alt="([^"]*)"', source) if len(a) > 20 and not _CJK.search(a)]
        if english_alt:
            thin.append(f"{page}: {len(english_alt)} figures with English alternative text, e.g. {english_alt[0][:60]!r}")
    assert not thin, "pages still largely English:\n" + "\n".join(thin)


def test_chinese_pages_show_the_chinese_figures(html_dir):
    zh = _zh_dir(html_dir)
    same = []
    for page in sorted(p for p in _pages(html_dir) if p.startswith("book/")):
        en_imgs = re.findall(r'<img[^>]*?src="([^"]*_images/[^"]*)"', (html_dir / page).read_text(encoding="utf-8"))
        zh_imgs = re.findall(r'<img[^>]*?src="([^"]*_images/[^"]*)"', (zh / page).read_text(encoding="utf-8"))
        if len(en_imgs) != len(zh_imgs):
            same.append(f"{page}: {len(en_imgs)} figures in English, {len(zh_imgs)} in Chinese")
        shared = {Path(s).name for s in en_imgs} & {Path(s).name for s in zh_imgs}
        if shared:
            same.append(f"{page}: {len(shared)} figures identical in both editions (no Chinese version)")
    assert not same, "\n".join(same)


def test_chinese_search_finds_chinese_words(browser, server, html_dir):
    _zh_dir(html_dir)
    found = {}
    for word in ("注意力", "掩码", "位置编码"):
        _open(browser, server, f"zh/search.html?q={word}")
        browser.execute_async_script("setTimeout(arguments[arguments.length - 1], 1500)")
        found[word] = len(browser.find_elements("css selector", "#search-results ul.search li"))
    assert all(n > 0 for n in found.values()), f"search results per word: {found}"
