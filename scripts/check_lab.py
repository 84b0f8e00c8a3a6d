#!/usr/bin/env python3
"""Check that a chapter's explorers work in JupyterLab, as a student opens them.

Starts ``jupyter lab`` from the course's environment on 127.0.0.1, opens one
notebook in headless Chromium, runs all cells, then

1. checks that no cell ended in an error and none printed to stderr;
2. checks that JupyterLab drew the explorer (a Vega-Lite chart with controls,
   ``course_book.explorers``);
3. moves each of the first explorer's controls and checks that the chart's
   marks were redrawn each time (not only its caption);
4. checks that Chinese text can be read: with the font stacks of the
   explorer's text and of the printed outputs, two different Chinese
   characters (from the page's own outputs where it has some) must draw
   different pictures, each as wide as a real glyph, not the missing-glyph
   box (``make install`` gives JupyterLab the course's font,
   ``scripts/install_lab_font.py``); the check means something only where the
   machine has no Chinese font of its own, so it says when it has one
   (``fc-list :lang=zh``);
5. saves a screenshot (default ``/tmp/lab_check.png``) to look at.

Usage (with ``COURSE_LIB_DATA`` set where the chapter needs the data, see README.md)::

    python scripts/check_lab.py                                  # chapter 4
    python scripts/check_lab.py --notebook book/10_inference.ipynb
    unshare -n sh -c 'ip link set lo up; python scripts/check_lab.py'   # offline, as root

Needs the Debian/Ubuntu packages ``chromium`` and ``chromium-driver`` and the
PyPI package ``selenium`` (e.g. in a throwaway virtual environment; it is not a
course dependency). Exits 0 when every check passes, 1 when one fails, 2 on a
setup error. Run by hand after ``make install``; it is not part of ``make test``.
The notebook is not saved: the file on disk stays as it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "course-lab-check"
APP = "(window.jupyterapp || window.jupyterlab)"
KERNEL = f"return {APP}.shell.currentWidget?.sessionContext?.session?.kernel?.status || ''"
# Per code cell: its execution count and its outputs, read from the notebook's model (what the
# page renders lazily does not matter).
CELLS = f"""const cells = {APP}.shell.currentWidget.content.model.cells; const out = [];
for (let i = 0; i < cells.length; i++) {{ const c = cells.get(i);
  if (c.type === 'code') out.push([c.executionCount, c.outputs.toJSON()]); }}
return out;"""
# The explorer's marks (bars, cells, lines, points; not its text) as one string.
MARKS = """const svg = Array.from(arguments[0].querySelectorAll('svg g[class*="mark-"]:not(.mark-text) path'),
  m => (m.getAttribute('d') || '') + (m.getAttribute('fill') || '') + (m.getAttribute('transform') || '')).join('|');
// JupyterLab's Vega renderer draws on a canvas: then the picture itself
return svg || Array.from(arguments[0].querySelectorAll('canvas'), c => c.toDataURL()).join('|');"""
# Moves one control of a Vega chart (a select, a range, a checkbox) and tells Vega.
MOVE = """const i = arguments[0];
if (i.tagName === 'SELECT') { i.selectedIndex = (i.selectedIndex + 1) % i.options.length; }
else if (i.type === 'range') { i.value = (Number(i.value) === Number(i.max)) ? i.min : i.max; }
else { i.checked = !i.checked; }
i.dispatchEvent(new Event('input', {bubbles: true})); i.dispatchEvent(new Event('change', {bubbles: true}));"""


# Can Chinese be read with the font stacks of the page's text? For the chart's text (SVG) and the printed
# outputs: the stack's font for two different Chinese characters of the page (else 中 and 文) is loaded
# as the page would, then each is drawn on a canvas. Missing glyphs draw one and the same box.
CJK = """const done = arguments[arguments.length - 1];
(async () => {
  const cjk = /[\u3400-\u9fff\uf900-\ufaff]/g;
  const area = document.querySelector('.jp-Notebook');
  const seen = [...new Set((area.textContent.match(cjk) || []).concat(['中', '文']))];
  const [a, b] = seen;
  const chartText = Array.from(document.querySelectorAll('.jp-RenderedVegaCommon5 svg text'));
  const printed = Array.from(document.querySelectorAll('.jp-RenderedText pre'));
  const pick = (els) => els.find(e => /[\u3400-\u9fff\uf900-\ufaff]/.test(e.textContent)) || els[0];
  const where = {'the explorer': pick(chartText), 'the printed outputs': pick(printed)};
  const result = {chars: a + b, stacks: {}};
  const canvas = document.createElement('canvas'); canvas.width = 64; canvas.height = 64;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const picture = (ch) => { ctx.clearRect(0, 0, 64, 64); ctx.fillText(ch, 8, 48);
                            return Array.from(ctx.getImageData(0, 0, 64, 64).data).join(','); };
  for (const [name, el] of Object.entries(where)) {
    if (!el) { result.stacks[name] = null; continue; }
    const family = getComputedStyle(el).fontFamily;
    const font = '40px ' + family;
    await document.fonts.load(font, a + b);
    ctx.font = font;
    result.stacks[name] = {family: family, differ: picture(a) !== picture(b),
                           width: ctx.measureText(a).width, box: ctx.measureText('\ue000').width};
  }
  return result;
})().then(done, e => done({error: String(e)}));"""


def _no_system_cjk_font() -> bool | None:
    """True when fontconfig knows no Chinese font (None: fc-list is not there)."""
    try:
        found = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return not found.strip()


def _cjk_failures(result: dict) -> list[str]:
    """The font check's findings as failure lines."""
    if "error" in result:
        return [f"the Chinese font check failed to run: {result['error']}"]
    failures = []
    for name, stack in result["stacks"].items():
        if stack is None:
            if name == "the explorer":
                failures.append("the explorer has no SVG text to check (JupyterLab should draw it as SVG)")
            continue
        if not stack["differ"] or abs(stack["width"] - stack["box"]) < 0.5:
            failures.append(f"Chinese text in {name} shows as boxes: {result['chars']!r} drawn with "
                            f"{stack['family']} (width {stack['width']:.1f}, missing-glyph box {stack['box']:.1f}); "
                            "is the course's JupyterLab font installed (make install)?")
    return failures


def _wait(predicate, timeout: float, step: float = 1.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False


def _up(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", timeout=2).close()
        return True
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", default="book/04_attention.ipynb", help="path relative to the repository")
    parser.add_argument("--venv", default=str(ROOT / ".venv"), help="the course's environment (has jupyter lab)")
    parser.add_argument("--port", type=int, default=8899)
    parser.add_argument("--timeout", type=float, default=240, help="seconds for Run All")
    parser.add_argument("--out", default="/tmp/lab_check.png", help="screenshot")
    args = parser.parse_args(argv)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        print("needs selenium: pip install selenium (in any environment)", file=sys.stderr)
        return 2
    lab, driver = Path(args.venv) / "bin" / "jupyter", shutil.which("chromedriver")
    if not lab.exists() or driver is None:
        print(f"needs {lab} (make install) and chromedriver (apt-get install chromium-driver)", file=sys.stderr)
        return 2
    log = tempfile.NamedTemporaryFile("w", prefix="lab-", suffix=".log", delete=False)
    workspaces = tempfile.mkdtemp(prefix="lab-workspaces-")  # a fresh layout: no tabs restored
    settings = Path(tempfile.mkdtemp(prefix="lab-settings-"))  # render every cell (no lazy windowing)
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}')
    (settings / "@jupyterlab" / "docmanager-extension").mkdir(parents=True)  # never save the run's outputs
    (settings / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings").write_text(
        '{"autosave": false}')
    if _no_system_cjk_font() is False:
        print("note: this machine has a Chinese font of its own (fc-list :lang=zh), so the Chinese font check "
              "cannot tell whether JupyterLab got the course's font", file=sys.stderr)
    notebook = ROOT / args.notebook
    before = notebook.read_bytes()
    server = subprocess.Popen(
        [str(lab), "lab", "--no-browser", f"--port={args.port}", "--ip=127.0.0.1", "--allow-root",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={ROOT}", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.workspaces_dir={workspaces}", f"--LabApp.user_settings_dir={settings}"],
        env=dict(os.environ, PYTHONHASHSEED="0"), stdout=log, stderr=subprocess.STDOUT)
    failures: list[str] = []
    try:
        opts = webdriver.ChromeOptions()
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,2000"):
            opts.add_argument(flag)
        browser = webdriver.Chrome(service=Service(driver), options=opts)
        try:
            if not _wait(lambda: _up(args.port), 60):
                print(f"jupyter lab did not start (server log: {log.name})", file=sys.stderr)
                return 2
            browser.get(f"http://127.0.0.1:{args.port}/lab/tree/{args.notebook}?token={TOKEN}")
            if not _wait(lambda: browser.execute_script(f"return !!{APP} && !!document.querySelector('.jp-Notebook')"), 90):
                print(f"JupyterLab did not open the notebook (server log: {log.name})", file=sys.stderr)
                return 2
            for button in browser.find_elements(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept"):
                button.click()  # e.g. "Select Kernel": the default, the environment's python3
            if not _wait(lambda: browser.execute_script(KERNEL) == "idle", 90):
                print(f"the kernel did not start (server log: {log.name})", file=sys.stderr)
                return 2
            # Stored outputs and counts first cleared, so that only this run's count as done.
            browser.execute_script(f"return {APP}.commands.execute('notebook:clear-all-cell-outputs')")
            if any(count is not None for count, _ in browser.execute_script(CELLS)):
                print("could not clear the stored outputs", file=sys.stderr)
                return 2
            browser.execute_script(f"{APP}.commands.execute('notebook:run-all-cells')")
            def done() -> bool:  # every cell ran, or one failed (Run All stops there)
                cells = browser.execute_script(CELLS)
                failed = any(o.get("output_type") == "error" for _, outs in cells for o in outs)
                return browser.execute_script(KERNEL) == "idle" and (
                    failed or all(count is not None for count, _ in cells))
            if not _wait(done, args.timeout, 2):
                failures.append(f"Run All did not finish within {args.timeout:.0f} s")
            elif any(count is None for count, _ in browser.execute_script(CELLS)):
                failures.append("Run All stopped at a failing cell")
            outputs = [o for _, outs in browser.execute_script(CELLS) for o in outs]
            bad = [o for o in outputs if o.get("output_type") == "error" or o.get("name") == "stderr"]
            if bad:
                failures.append(f"{len(bad)} error or stderr output(s), first: {str(bad[0])[:300]!r}")
            time.sleep(3)
            dialogs = browser.find_elements(By.CSS_SELECTOR, ".jp-Dialog")
            charts = browser.find_elements(By.CSS_SELECTOR, ".jp-RenderedVegaCommon5, .vega-embed")
            if dialogs:
                failures.append(f"JupyterLab shows a dialog: {dialogs[0].text[:300]!r}")
            elif not charts:
                failures.append("no explorer chart was drawn (a course_book.explorers chart)")
            else:
                chart = charts[0]
                browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
                controls = chart.find_elements(By.CSS_SELECTOR, ".vega-bindings select, .vega-bindings input")
                if not controls:
                    failures.append("the explorer has no controls")
                for control in controls:
                    if control.get_attribute("type") == "radio":
                        continue
                    marks = browser.execute_script(MARKS, chart)
                    browser.execute_script(MOVE, control)
                    if not _wait(lambda: browser.execute_script(MARKS, chart) != marks, 10, 0.5):
                        failures.append(f"moving control {control.get_attribute('name')!r} did not redraw the chart")
            if charts:
                browser.set_script_timeout(60)
                result = browser.execute_async_script(CJK)
                failures += _cjk_failures(result)
                shown = {k: v and v["family"] for k, v in result.get("stacks", {}).items()}
                print(f"Chinese text {result.get('chars')!r} checked with: {shown}")
            browser.save_screenshot(args.out)
        finally:
            browser.quit()
    finally:
        server.terminate()
        server.wait(20)
        shutil.rmtree(workspaces, ignore_errors=True)
        shutil.rmtree(settings, ignore_errors=True)
        if notebook.read_bytes() != before:
            notebook.write_bytes(before)
            print(f"JupyterLab saved {args.notebook}: restored the file as it was", file=sys.stderr)
            failures.append("JupyterLab saved the notebook (autosave should be off)")
    for line in failures:
        print("FAIL:", line)
    print(f"screenshot: {args.out}" + ("" if failures else "\nall checks passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
