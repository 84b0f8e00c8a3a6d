from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pytest_addoption(parser):
    parser.addoption("--html-dir", default=str(ROOT / "_build" / "html"),
                     help="the built book to open (default: _build/html)")
