"""Where a dataset's files come from: three explicit tiers, never a silent fallback.

- ``mini``: a small real stand-in built offline from data shipped inside an installed package, written in the
  benchmark's own file format so the same reader runs on it.
- ``path``: the user's own copy (``data.path=/dir``).
- ``download``: fetch the canonical files into the cache, check sha256, then prepare them.

Every dataset is described by a :class:`DatasetSpec`; :func:`locate` returns the directory holding its files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from genlab.data.text.progress import Progress
from genlab.errors import DataError
from genlab.utils import sha256_file, stable_hash

Source = Literal["mini", "path", "download"]
SOURCES = ("mini", "path", "download")
DEFAULT_CACHE = Path(os.environ.get("GENLAB_CACHE", Path.home() / ".cache" / "genlab"))
DOWNLOAD_TIMEOUT_S = 30


@dataclass(frozen=True)
class RemoteFile:
    """One file of the ``download`` tier: where it lives and what it must hash to."""

    url: str
    sha256: str | None
    filename: str


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset needs on disk and how each tier provides it.

    ``files`` are paths relative to the dataset directory that the reader opens (a trailing "/" names a folder).
    ``prepare`` turns downloaded files (in the same directory) into ``files`` (unzip, split); the ``path`` tier
    runs it too, into the cache, when a user's folder holds the downloads instead of the prepared files.
    ``build_mini(dir)`` writes the mini's ``files``.
    """

    name: str
    files: tuple[str, ...]
    downloads: tuple[RemoteFile, ...] = ()
    prepare: Callable[[Path], None] | None = None
    build_mini: Callable[[Path], None] | None = None
    mini_version: str = "1"
    homepage: str = ""
    notes: str = ""
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)


def offline() -> bool:
    return os.environ.get("GENLAB_OFFLINE", "0").lower() in ("1", "true", "yes")


def locate(spec: DatasetSpec, source: str, path: str | None = None, cache_dir: str | os.PathLike | None = None) -> Path:
    """Return the directory holding ``spec.files`` for the chosen tier, building or downloading when needed."""
    if source not in SOURCES:
        raise DataError(f"data.source={source!r} is not one of {SOURCES} (dataset {spec.name}).")
    cache = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    if source == "path":
        return _from_path(spec, path, cache)
    if source == "mini":
        return _build_mini(spec, cache)
    return _download(spec, cache, path)


def _missing(spec: DatasetSpec, root: Path) -> list[str]:
    return [f for f in spec.files if not ((root / f).is_dir() if f.endswith("/") else (root / f).is_file())]


def _listing(names: list[str] | tuple[str, ...], most: int = 4) -> str:
    """A few names and the count, so a dataset of 100 shards does not print all of them."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown}, ... ({len(names)} in all)"


def _how_to_fix(spec: DatasetSpec) -> str:
    lines = [f"  expected files: {_listing(spec.files)}"]
    if spec.downloads:
        lines.append("  canonical sources: " + _listing([d.url for d in spec.downloads]))
        lines.append("  fix: point data.path=/your/dir at a folder with these files or with the downloads ("
                     + _listing([d.filename for d in spec.downloads]) + "), or fetch them with data.source=download")
    else:
        lines.append("  fix: point at your copy with data.path=/your/dir")
    if spec.build_mini is not None:
        lines.append("  or try the offline stand-in with data.source=mini")
    if spec.homepage:
        lines.append(f"  see {spec.homepage}")
    return "\n".join(lines)


def _from_path(spec: DatasetSpec, path: str | None, cache: Path) -> Path:
    if not path:
        raise DataError(f"dataset {spec.name}: data.source=path needs data.path=/dir.\n{_how_to_fix(spec)}")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise DataError(f"dataset {spec.name}: data.path={path} is not a directory.\n{_how_to_fix(spec)}")
    missing = _missing(spec, root)
    if not missing:
        return root
    if spec.prepare is not None and spec.downloads and all((root / d.filename).is_file() for d in spec.downloads):
        return _prepare_from(spec, root, cache)
    raise DataError(f"dataset {spec.name}: {root} lacks {len(missing)} of its {len(spec.files)} files "
                    f"({_listing(missing)}).\n{_how_to_fix(spec)}")


def _prepare_from(spec: DatasetSpec, root: Path, cache: Path) -> Path:
    """The user's folder holds the raw downloads (e.g. ``enwik8.zip``): check them and prepare a copy in the cache,
    leaving the user's folder untouched. Keyed by the folder and the downloads' sizes and times."""
    archives = [root / d.filename for d in spec.downloads]
    key = stable_hash(str(root.resolve()), [(a.name, a.stat().st_size, a.stat().st_mtime_ns) for a in archives])
    dest = cache / "prepared" / f"{spec.name}-{key}"
    if dest.is_dir() and not _missing(spec, dest):
        return dest
    for remote, archive in zip(spec.downloads, archives, strict=True):
        verify_sha256(archive, remote.sha256)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        for archive in archives:
            (tmp / archive.name).symlink_to(archive.resolve())
        spec.prepare(tmp)
        for archive in archives:
            (tmp / archive.name).unlink(missing_ok=True)
        missing = _missing(spec, tmp)
        if missing:
            raise DataError(f"dataset {spec.name}: preparing the downloads in {root} did not give "
                            f"{_listing(missing)}; the files are a different version than expected.")
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def expected_root(spec: DatasetSpec, source: str, path: str | None = None,
                  cache_dir: str | os.PathLike | None = None) -> Path:
    """The directory :func:`locate` reads ``spec`` from, without building, downloading or checking anything."""
    cache = Path(cache_dir) if cache_dir else DEFAULT_CACHE
    if source == "mini":
        return cache / "mini" / f"{spec.name}-v{spec.mini_version}"
    if source == "path" or path:
        return Path(path or ".").expanduser()
    return cache / "download" / spec.name


def _build_mini(spec: DatasetSpec, cache: Path) -> Path:
    if spec.build_mini is None:
        raise DataError(f"dataset {spec.name} has no offline mini.\n{_how_to_fix(spec)}")
    root = expected_root(spec, "mini", cache_dir=cache)
    if root.is_dir() and not _missing(spec, root):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}."))
    try:
        spec.build_mini(tmp)
        missing = _missing(spec, tmp)
        if missing:
            raise RuntimeError(f"mini builder for {spec.name} did not write {missing}")
        try:
            os.replace(tmp, root)  # atomic publish; a concurrent builder may have won the race
        except OSError:
            if _missing(spec, root):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _download(spec: DatasetSpec, cache: Path, path: str | None) -> Path:
    root = expected_root(spec, "download", path, cache)
    if not _missing(spec, root):
        return root
    if not spec.downloads:
        raise DataError(f"dataset {spec.name} has no canonical download.\n{_how_to_fix(spec)}")
    absent = [d.filename for d in spec.downloads if not (root / d.filename).is_file()]
    if offline() and absent:  # downloads already in the folder are used (and checked) offline too
        raise DataError(
            f"dataset {spec.name}: {root} lacks {_listing(absent)} and GENLAB_OFFLINE is set, so nothing will be "
            f"downloaded.\n{_how_to_fix(spec)}"
        )
    root.mkdir(parents=True, exist_ok=True)
    for remote in spec.downloads:
        fetch(remote, root / remote.filename)
    if spec.prepare is not None:
        spec.prepare(root)
    missing = _missing(spec, root)
    if missing:
        raise DataError(f"dataset {spec.name}: after download and preparation {root} still lacks {missing}.")
    return root


def fetch(remote: RemoteFile, dest: Path) -> Path:
    """Download ``remote`` to ``dest`` (atomically, with a timeout) and verify its sha256."""
    if dest.is_file() and (remote.sha256 is None or offline()):
        verify_sha256(dest, remote.sha256)
        return dest
    if dest.is_file() and sha256_file(dest) == remote.sha256:
        return dest
    tmp = dest.with_name(f".{dest.name}.part")
    try:
        with urllib.request.urlopen(remote.url, timeout=DOWNLOAD_TIMEOUT_S) as resp, open(tmp, "wb") as out:
            progress = Progress(f"downloading {remote.url}", int(resp.headers.get("Content-Length") or 0))
            while block := resp.read(1 << 20):
                out.write(block)
                progress.advance(len(block))
            progress.finish()
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"could not download {remote.url} ({err}). Download it by hand into {dest.parent} and rerun, "
            "or use data.path=/your/dir."
        ) from err
    verify_sha256(tmp, remote.sha256, shown_as=remote.url)
    os.replace(tmp, dest)
    return dest


def verify_sha256(path: Path, expected: str | None, shown_as: str | None = None) -> None:
    """Raise a DataError (and delete nothing but a ``.part`` file) when ``path`` does not hash to ``expected``."""
    if expected is None:
        return
    actual = sha256_file(path)
    if actual != expected:
        if path.name.endswith(".part"):
            path.unlink(missing_ok=True)
        raise DataError(
            f"checksum mismatch for {shown_as or path}: sha256 {actual}, expected {expected}. "
            f"The file is corrupt or a different version: delete {path} and download it again "
            "(data.source=download, without GENLAB_OFFLINE) or put the canonical file there."
        )


def package_file(package: str, relative: str, sha256: str | None = None) -> Path:
    """Path of a data file shipped inside an installed package, located without importing the package."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"the offline mini needs the package '{package}' (pip install 'genlab[data]'), which is not installed."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise DataError(f"{path} is missing from the installed '{package}'; reinstall it (pip install 'genlab[data]').")
    verify_sha256(path, sha256)
    return path
