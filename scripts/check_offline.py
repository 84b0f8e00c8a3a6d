#!/usr/bin/env python3
"""Check that the built book shows formulas and widgets with the network off.

Serves ``_build/html`` on 127.0.0.1, opens one chapter in headless Chromium
with every non-local address made unresolvable, then

1. checks that no page of the book loads a script or stylesheet from another
   host (a static check of every ``.html`` file);
2. checks that the network block itself holds: a script asked for by host
   name must never reach the local server;
3. dumps the page's DOM after a virtual-time budget and checks that MathJax
   typeset the formulas (``mjx-container`` elements) and that the widget
   manager drew the widgets (``.jupyter-widgets`` / ``.widget-slider``);
4. checks that no file the page asked for was missing on the server (a 404 for
   a vendored font or MathJax extension means scripts/vendor_js.sh copies too
   little);
5. saves a screenshot (default ``/tmp/offline_check.png``) to look at.

Usage::

    python scripts/check_offline.py                      # first page with widgets
    python scripts/check_offline.py --page book/04_attention.html
    python scripts/check_offline.py --no-widgets --page book/intro.html

Needs the Debian/Ubuntu package ``chromium`` (``apt-get install -y chromium``)
or ``--chromium PATH``. Exits 0 when every check passes, 1 when one fails, 2 on
a usage or setup error. Run by hand after ``make book``; it is not part of
``make test``.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent

# Addresses a page may name without loading them at view time: sphinx-thebe's
# configuration names the thebe library, fetched only when a reader clicks
# "live code" (a launch button).
ALLOWED_REMOTE = ("https://unpkg.com/thebe",)

# The self-test of the network block: a page served by the local server asks
# for a script from the same server under the host name "localhost", which the
# resolver rules below must block. If the script is fetched, the block leaks.
PROBE_PAGE = "/__offline_probe__.html"
PROBE_SCRIPT = "/__offline_probe__.js"

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    # The network block: every host name fails to resolve except the local server,
    # and any proxy use is pointed at a closed local port.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=127.0.0.1",
]


class _AssetParser(HTMLParser):
    """Collects the addresses of scripts and stylesheets a page loads."""

    def __init__(self) -> None:
        super().__init__()
        self.assets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and values.get("src"):
            self.assets.append(values["src"] or "")
        elif tag == "link" and "stylesheet" in (values.get("rel") or "") and values.get("href"):
            self.assets.append(values["href"] or "")


def remote_assets(html_dir: Path) -> list[str]:
    """Return ``"page: address"`` for every remote script/stylesheet in the book."""
    problems = []
    for page in sorted(html_dir.rglob("*.html")):
        parser = _AssetParser()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for address in parser.assets:
            remote = address.startswith("//") or urlsplit(address).scheme in ("http", "https")
            if remote and not address.startswith(ALLOWED_REMOTE):
                problems.append(f"{page.relative_to(html_dir)}: {address}")
    return problems


class _Server:
    """A quiet static file server on 127.0.0.1 that records missing files."""

    def __init__(self, directory: Path) -> None:
        self.missing: list[str] = []
        self.served: list[str] = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args) -> None:  # noqa: A002
                pass

            def send_error(self, code, message=None, explain=None):
                if code == 404:
                    outer.missing.append(self.path)
                return super().send_error(code, message, explain)

            def end_headers(self):
                outer.served.append(self.path)
                super().end_headers()

            def do_GET(self):
                if self.path == PROBE_PAGE:  # see network_block_holds()
                    body = (
                        f'<html><body><script src="http://localhost:{outer.port}'
                        f'{PROBE_SCRIPT}"></script>probe</body></html>'
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                super().do_GET()

        handler = functools.partial(Handler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "_Server":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def find_chromium(explicit: str | None) -> str:
    """Return a Chromium executable, or exit 2 with advice."""
    candidates = [explicit] if explicit else ["chromium", "chromium-browser", "google-chrome"]
    for name in candidates:
        path = shutil.which(name) if name else None
        if path:
            return path
    sys.exit(
        "check_offline: Chromium not found. Install it (Debian/Ubuntu: "
        "`apt-get update && apt-get install -y chromium`) or pass --chromium PATH."
    )


def run_chromium(chromium: str, url: str, extra: list[str], timeout: float) -> str:
    """Run headless Chromium with a fresh profile; return its stdout."""
    with tempfile.TemporaryDirectory(prefix="check-offline-") as profile:
        command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url]
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            sys.exit(f"check_offline: Chromium did not finish within {timeout:.0f} s")
    if result.returncode != 0:
        sys.exit(
            f"check_offline: Chromium failed (exit {result.returncode}):\n"
            + result.stderr[-3000:]
        )
    return result.stdout


def default_page(html_dir: Path) -> str | None:
    """The first chapter page that loads the widget manager, if any."""
    for page in sorted((html_dir / "book").glob("*.html")):
        if "embed-amd.js" in page.read_text(encoding="utf-8", errors="replace"):
            return page.relative_to(html_dir).as_posix()
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html",
                        help="the built book (default: _build/html)")
    parser.add_argument("--page", help="page to open, relative to --html "
                        "(default: the first chapter page with widgets)")
    parser.add_argument("--screenshot", type=Path, default=Path("/tmp/offline_check.png"),
                        help="where to save the screenshot (default: /tmp/offline_check.png)")
    parser.add_argument("--no-widgets", action="store_true",
                        help="do not require widgets on the page (only formulas)")
    parser.add_argument("--no-math", action="store_true",
                        help="do not require formulas on the page (only widgets)")
    parser.add_argument("--chromium", help="Chromium executable (default: found on PATH)")
    parser.add_argument("--budget-ms", type=int, default=20000,
                        help="virtual time Chromium lets the page run (default 20000)")
    parser.add_argument("--window-size", default="1280,2400",
                        help="screenshot size WIDTH,HEIGHT (default 1280,2400)")
    args = parser.parse_args(argv)

    html_dir = args.html.resolve()
    if not (html_dir / "index.html").is_file():
        print(f"check_offline: no built book at {html_dir}; run `make book` first", file=sys.stderr)
        return 2
    page = args.page or default_page(html_dir)
    if page is None:
        print("check_offline: no chapter page with widgets found; pass --page "
              "(and --no-widgets for a page without widgets)", file=sys.stderr)
        return 2
    if not (html_dir / page).is_file():
        print(f"check_offline: {html_dir / page} does not exist", file=sys.stderr)
        return 2
    chromium = find_chromium(args.chromium)

    failures: list[str] = []
    remote = remote_assets(html_dir)
    if remote:
        failures.append("pages load scripts/stylesheets from other hosts:\n    "
                        + "\n    ".join(remote))

    with _Server(html_dir) as server:
        # the block itself: a script from "localhost" must not be fetched
        probe = f"http://127.0.0.1:{server.port}{PROBE_PAGE}"
        run_chromium(chromium, probe, ["--virtual-time-budget=3000", "--dump-dom"], timeout=60)
        if PROBE_SCRIPT in server.served or PROBE_SCRIPT in server.missing:
            print("check_offline: the network block does not hold (Chromium fetched a "
                  "script by host name); results would be meaningless", file=sys.stderr)
            return 2
        server.served.clear()
        server.missing.clear()

        url = f"http://127.0.0.1:{server.port}/{page}"
        timing = [f"--virtual-time-budget={args.budget_ms}", "--run-all-compositor-stages-before-draw"]
        dom = run_chromium(chromium, url, [*timing, "--dump-dom"], timeout=180)
        args.screenshot.parent.mkdir(parents=True, exist_ok=True)
        if args.screenshot.exists():
            args.screenshot.unlink()
        run_chromium(
            chromium, url,
            [*timing, f"--window-size={args.window_size}", f"--screenshot={args.screenshot}"],
            timeout=180,
        )
        missing = sorted(set(server.missing) - {"/favicon.ico"})

    n_math = len(re.findall(r"<mjx-container\b", dom))
    n_widgets = len(re.findall(r'class="[^"]*\bjupyter-widgets\b', dom))
    n_sliders = len(re.findall(r'class="[^"]*\bwidget-slider\b', dom))
    n_widget_images = len(re.findall(r'class="[^"]*\bwidget-output\b', dom))
    n_raw_math = len(re.findall(r'class="math[^"]*"', dom))
    print(f"check_offline: {url} with the network blocked")
    print(f"  formulas typeset (mjx-container): {n_math} (math elements in the page: {n_raw_math})")
    print(f"  widget elements (.jupyter-widgets): {n_widgets}, sliders: {n_sliders}, "
          f"output widgets: {n_widget_images}")

    if not args.no_math and n_math == 0:
        failures.append("MathJax rendered no formula (no <mjx-container>): is "
                        "_static/vendor/mathjax served? run scripts/vendor_js.sh, then rebuild")
    if not args.no_widgets and n_widgets == 0 and n_sliders == 0:
        failures.append("no widget was rendered (no .jupyter-widgets/.widget-slider): are "
                        "_static/vendor/requirejs and html-manager served, and does the "
                        "page's notebook hold saved widget state?")
    if missing:
        failures.append("files requested but missing on the server:\n    " + "\n    ".join(missing))
    if not args.screenshot.is_file() or args.screenshot.stat().st_size == 0:
        failures.append(f"no screenshot was written to {args.screenshot}")
    else:
        print(f"  screenshot: {args.screenshot} (look at it)")

    if failures:
        for failure in failures:
            print(f"FAIL: {failure}", file=sys.stderr)
        return 1
    print("check_offline: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
