"""Finding a data file: local copy, cache, or a validated, atomic download (chapter 9).

Every loader of :mod:`course_lib.data` asks :func:`resolve_file` for its file.
The file is looked for, in this order:

1. ``root / relpath`` when the caller passes ``root=``;
2. ``$COURSE_LIB_DATA / relpath`` when that environment variable is set (a
   directory laid out like the course's ``shared/data`` folder, e.g.
   ``tatoeba-cmn-eng/cmn.txt``);
3. ``cache_dir() / relpath``, the user cache (``pooch.os_cache("course_lib")``,
   e.g. ``~/.cache/course_lib``, or ``$COURSE_LIB_CACHE`` when set);
4. a download from each canonical address in turn, into the cache.

A download is *atomic*: it goes into a fresh staging folder next to the final
path, is checked (sha256 where the source's bytes are fixed, then parsed by a
validator: columns, line counts), and only then moved into place with
:func:`os.replace`. A failed, interrupted or corrupt download therefore never
leaves a file at the cache path (a process killed outright may leave an empty
``.download-*`` folder, which is never read).
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DataNotFoundError",
    "DataValidationError",
    "Source",
    "RemoteFile",
    "cache_dir",
    "resolve_file",
    "download_file",
    "DATA_ENV_VAR",
    "CACHE_ENV_VAR",
    "USER_AGENT",
    "read_utf8",
    "validate_gzip_lines",
    "validate_tab_pairs",
    "validate_text",
]

_log = logging.getLogger(__name__)

DATA_ENV_VAR = "COURSE_LIB_DATA"
"""Environment variable naming a folder of local copies, laid out like ``shared/data``."""

CACHE_ENV_VAR = "COURSE_LIB_CACHE"
"""Environment variable overriding the download cache folder."""

USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
"""A browser-like User-Agent: manythings.org may refuse the default ``python-requests`` one."""

_TIMEOUT = (15, 120)  # (connect, read) seconds, passed to requests through pooch


class DataNotFoundError(RuntimeError):
    """A data file is neither available locally nor downloadable (e.g. offline).

    The message names the file, every place looked at, every address tried
    (with the reason it failed) and the exact paths where a manually downloaded
    copy can be put.

    Attributes:
        relpath: the file's path relative to a data root, e.g. ``"tatoeba-cmn-eng/cmn.txt"``.
        urls: the addresses that were tried (empty when ``download=False``).
        cache_path: where a downloaded copy would have been stored.
    """

    def __init__(self, message: str, relpath: str = "", urls: tuple[str, ...] = (), cache_path: Path | None = None):
        super().__init__(message)
        self.relpath = relpath
        self.urls = urls
        self.cache_path = cache_path


class DataValidationError(ValueError):
    """A file's contents are not what the data set should contain (wrong hash, unparsable, too short)."""


@dataclass(frozen=True)
class Source:
    """One address a data file can be downloaded from.

    Args:
        url: the http(s) address.
        sha256: hex digest of the downloaded bytes, or ``None`` when the source
            is re-published upstream and its bytes change (then only the
            validator guards the contents).
        member: for a zip archive, the base name of the file to extract from it
            (e.g. ``"cmn.txt"``); ``None`` when the address serves the file itself.
    """

    url: str
    sha256: str | None = None
    member: str | None = None


@dataclass(frozen=True)
class RemoteFile:
    """Where a data file lives locally (``relpath``) and remotely (``sources``).

    Args:
        relpath: path relative to a data root, using ``/`` (e.g. ``"multi30k/train.de.gz"``).
        sources: addresses tried in order; the first one is the canonical one.
        description: a human-readable name used in messages.
        validate: ``validate(path)`` raises :class:`DataValidationError` when a
            downloaded file is not usable (called before it is moved into the cache).
        note: extra text for error messages (e.g. a license restriction).
    """

    relpath: str
    sources: tuple[Source, ...]
    description: str = ""
    validate: Callable[[Path], None] | None = field(default=None, compare=False)
    note: str = ""


def cache_dir() -> Path:
    """The download cache folder: ``$COURSE_LIB_CACHE`` or ``pooch.os_cache("course_lib")``.

    Returns:
        an absolute :class:`~pathlib.Path` (not created here).
    """
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser().resolve()
    import pooch  # lazy: keep `import course_lib.data` cheap

    return Path(pooch.os_cache("course_lib")).expanduser().resolve()


def _local_candidates(spec: RemoteFile, root: str | os.PathLike | None) -> list[tuple[str, Path | None]]:
    rel = Path(*spec.relpath.split("/"))
    places: list[tuple[str, Path | None]] = []
    places.append(("root= argument", Path(root).expanduser() / rel if root is not None else None))
    env = os.environ.get(DATA_ENV_VAR)
    places.append((f"${DATA_ENV_VAR}", Path(env).expanduser() / rel if env else None))
    places.append(("cache", cache_dir() / rel))
    return places


def resolve_file(spec: RemoteFile, root: str | os.PathLike | None = None, *, download: bool = True) -> Path:
    """Return the path of a local, usable copy of ``spec``, downloading it if needed.

    Order: ``root / relpath`` -> ``$COURSE_LIB_DATA / relpath`` -> ``cache_dir() /
    relpath`` -> download from each of ``spec.sources`` in turn into the cache.
    Local copies are trusted as they are (a loader parses them anyway); only
    downloads are hashed and validated. When ``root`` or ``$COURSE_LIB_DATA`` is
    given but lacks the file, a :class:`UserWarning` says so before falling back.

    Args:
        spec: the file to find, e.g. ``course_lib.data.TATOEBA_FILE``.
        root: optional folder laid out like ``shared/data``.
        download: if ``False``, never touch the network.

    Returns:
        the path of an existing file.

    Raises:
        DataNotFoundError: no local copy and the download failed or was not allowed.
        TypeError: ``spec`` is not a :class:`RemoteFile`.

    Source: chapter 9 (where the data comes from).
    """
    if not isinstance(spec, RemoteFile):
        raise TypeError(f"spec must be a RemoteFile; got {type(spec).__name__}")
    places = _local_candidates(spec, root)
    for label, path in places:
        if path is None:
            continue
        if path.is_file():
            return path
        if label != "cache":
            warnings.warn(
                f"{label} is set but {path} does not exist; looking further (cache, then download).",
                UserWarning,
                stacklevel=3,
            )
    cache_path = places[-1][1]
    assert cache_path is not None
    if not download:
        raise DataNotFoundError(
            _not_found_message(spec, places, failures=[], download=False),
            spec.relpath,
            (),
            cache_path,
        )
    return download_file(spec, cache_path, _places=places)


def download_file(spec: RemoteFile, dest: str | os.PathLike, *, _places=None) -> Path:
    """Download ``spec`` to ``dest`` atomically, trying each source in turn.

    Each attempt downloads into a fresh staging folder in ``dest``'s folder
    (with pooch's :class:`~pooch.HTTPDownloader`, a browser-like User-Agent and
    a tqdm progress bar), checks the sha256 when the source has one, extracts
    the zip member when there is one, runs ``spec.validate`` and only then moves
    the file to ``dest`` with :func:`os.replace`. The staging folder is always
    removed, so a failure leaves no file at ``dest``.

    Args:
        spec: what to download.
        dest: the final path (its folder is created).

    Returns:
        ``Path(dest)``.

    Raises:
        DataNotFoundError: every source failed; the message lists why.
    """
    import pooch  # lazy

    dest = Path(dest)
    places = _places if _places is not None else [("cache", dest)]
    failures: list[tuple[str, str]] = []
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        failures.append(("(no download tried)", f"cannot create the cache folder {dest.parent}: {exc}"))
        raise DataNotFoundError(
            _not_found_message(spec, places, failures, download=True), spec.relpath, (), dest
        ) from exc
    for source in spec.sources:
        try:
            staging = Path(tempfile.mkdtemp(prefix=".download-", dir=dest.parent))
        except OSError as exc:
            failures.append((source.url, f"cannot write in {dest.parent}: {exc}"))
            continue
        try:
            name = source.url.rstrip("/").rsplit("/", 1)[-1] or "download"
            raw = staging / name
            _log.info("Downloading %s from %s", spec.relpath, source.url)
            downloader = pooch.HTTPDownloader(
                progressbar=True, headers={"User-Agent": USER_AGENT}, timeout=_TIMEOUT
            )
            downloader(source.url, str(raw), None)
            if source.sha256 is not None:
                got = pooch.file_hash(str(raw), alg="sha256")
                if got != source.sha256.lower():
                    raise DataValidationError(f"sha256 mismatch: expected {source.sha256}, got {got}")
            if source.member is not None:
                raw = _extract_member(raw, source.member, staging)
            if spec.validate is not None:
                spec.validate(raw)
            os.replace(raw, dest)
            return dest
        except Exception as exc:  # noqa: BLE001 - every failure is reported in the final error
            failures.append((source.url, f"{type(exc).__name__}: {exc}"))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    raise DataNotFoundError(
        _not_found_message(spec, places, failures, download=True),
        spec.relpath,
        tuple(s.url for s in spec.sources),
        dest,
    )


def _extract_member(archive: Path, member: str, staging: Path) -> Path:
    try:
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == member]
            if not names:
                raise DataValidationError(f"the zip archive holds no {member!r} (it holds {zf.namelist()[:10]})")
            out = staging / ("extracted-" + member)
            with zf.open(names[0]) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
    except zipfile.BadZipFile as exc:
        raise DataValidationError(f"not a zip archive ({exc}); the server may have sent an error page") from exc
    return out


def _not_found_message(spec: RemoteFile, places, failures, download: bool) -> str:
    what = f"{spec.description} ({spec.relpath})" if spec.description else spec.relpath
    lines = [f"Could not find the data file {what}."]
    lines.append("Looked for a local copy at:")
    for label, path in places:
        missing = "(not set)" if label.startswith("$") else "(not given)"
        lines.append(f"  - {label}: {path if path is not None else missing}")
    if download:
        lines.append("Download failed from every address:")
        for url, why in failures:
            lines.append(f"  - {url}\n      {why}")
    else:
        lines.append("Downloading was not allowed (download=False).")
    cache_path = places[-1][1]
    lines.append("To fix it, get the file on a machine with network access:")
    for s in spec.sources:
        how = f"download {s.url} and extract {s.member}" if s.member else f"download {s.url}"
        if s.sha256:
            how += f" (sha256 {s.sha256})"
        lines.append(f"  - {how}")
    lines.append("and put it at one of:")
    lines.append(f"  - {cache_path}   (the cache; or set ${CACHE_ENV_VAR} to another folder)")
    lines.append(f"  - <DIR>/{spec.relpath}   with ${DATA_ENV_VAR}=<DIR> set, or pass root=<DIR>")
    if spec.note:
        lines.append(spec.note)
    return "\n".join(lines)


# ----------------------------------------------------------------------------- validators


def validate_tab_pairs(path: Path, *, min_pairs: int, min_valid_fraction: float = 0.95) -> None:
    """Check a tab-separated pairs file (Tatoeba/manythings format).

    At least ``min_pairs`` lines must hold two non-empty tab-separated columns,
    and they must be at least ``min_valid_fraction`` of the non-empty lines.

    Raises:
        DataValidationError: not UTF-8, or too few well-formed lines (e.g. an
            HTML error page served instead of the data).
    """
    text = read_utf8(path, "utf-8-sig")
    lines = [ln for ln in text.split("\n") if ln.strip()]
    good = sum(1 for ln in lines if len(ln.split("\t")) >= 2 and all(c.strip() for c in ln.split("\t")[:2]))
    if good < min_pairs or good < min_valid_fraction * len(lines):
        raise DataValidationError(
            f"expected >= {min_pairs} lines of 'source<TAB>target[<TAB>attribution]'; "
            f"found {good} well-formed among {len(lines)} non-empty lines"
        )


def read_utf8(path: str | os.PathLike, encoding: str = "utf-8", *, name: str = "") -> str:
    """The text of ``path``; :class:`DataValidationError` when it is not UTF-8 (``name`` starts the message)."""
    try:
        return Path(path).read_bytes().decode(encoding)
    except UnicodeDecodeError as exc:
        raise DataValidationError(f"{name + ' is ' if name else ''}not UTF-8 text: {exc}") from exc


def validate_text(path: Path, *, min_chars: int) -> None:
    """Check a UTF-8 text file of at least ``min_chars`` characters.

    Raises:
        DataValidationError: not UTF-8 or too short.
    """
    text = read_utf8(path)
    if len(text) < min_chars:
        raise DataValidationError(f"expected >= {min_chars} characters; found {len(text)}")


def validate_gzip_lines(path: Path, *, n_lines: int) -> None:
    """Check a gzip-compressed UTF-8 text file with exactly ``n_lines`` lines.

    Raises:
        DataValidationError: not gzip, not UTF-8, or the wrong number of lines.
    """
    try:
        with gzip.open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise DataValidationError(f"not a gzip-compressed UTF-8 text file: {exc}") from exc
    count = len(text.rstrip("\n").split("\n")) if text.strip() else 0
    if count != n_lines:
        raise DataValidationError(f"expected {n_lines} lines; found {count}")
