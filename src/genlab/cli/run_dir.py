"""The run directory as a resource of one process: writable, locked against a second run, free of half-written files.

Checked before any data is loaded or any step is trained, so a wrong ``paths.output_dir`` costs seconds, not a
training run."""

from __future__ import annotations

import atexit
import errno
import os
import shutil
from pathlib import Path

from genlab.errors import ConfigError, UserError
from genlab.runs import RUN_FILE

HYDRA_START_FILES = {".hydra", "train.log", "eval.log"}  # what Hydra writes into a run dir before our code runs
LOCK_FILE = ".lock"  # holds the pid of the train.py process writing into the run dir
MIN_FREE_BYTES = 64 << 20  # below this a checkpoint write will fail: refuse at start rather than after training
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


class RunDirError(UserError):
    pass


def check_writable(out: Path) -> None:
    """``out`` and ``out/checkpoints`` can be created and written, and the disk has room for checkpoints."""
    probe = out / "checkpoints" / f".write-probe-{os.getpid()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise RunDirError(f"the run directory {out} is not writable ({err.strerror or err}); set "
                          "paths.output_dir (or hydra.run.dir) to a writable folder, or free the disk.") from err
    free = shutil.disk_usage(out).free
    if free < MIN_FREE_BYTES:
        raise RunDirError(f"the disk holding the run directory {out} has only {free >> 20} MiB free; free space or "
                          "set paths.output_dir (or hydra.run.dir) to another disk.")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def acquire_lock(out: Path) -> None:
    """Refuse a second run into ``out`` while the first is alive; a lock left by a killed run is taken over."""
    lock = out / LOCK_FILE
    mine = str(os.getpid())
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                owner = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                owner = 0
            if owner and owner != os.getpid() and _alive(owner):
                raise ConfigError(f"another train.py (pid {owner}) is writing into {out} (lock file {lock}); give "
                                  "this run its own hydra.run.dir, or wait for that one to end. If no such process "
                                  f"exists, delete {lock}.") from None
            lock.unlink(missing_ok=True)  # stale: its process was killed
            continue
        with os.fdopen(fd, "w") as f:
            f.write(mine)
        atexit.register(release_lock, out)
        return
    raise ConfigError(f"could not take the lock {lock}; delete it if no train.py is running into {out}.")


def release_lock(out: Path) -> None:
    lock = out / LOCK_FILE
    try:
        if lock.read_text().strip() == str(os.getpid()):
            lock.unlink()
    except OSError:
        pass


def remove_partial_writes(out: Path) -> list[Path]:
    """Temporary files of writes that a kill interrupted (``genlab.utils.atomic_write`` names them ``.<name>.*.tmp``);
    only called while holding the lock, so no live writer owns them."""
    removed = []
    for folder in (out, out / "checkpoints"):
        for tmp in folder.glob(".*.tmp") if folder.is_dir() else ():
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def disk_error(err: BaseException) -> OSError | None:
    """The full-disk / permission OSError behind ``err`` (Lightning and torch.save wrap it), else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
            return err
        if isinstance(err, RuntimeError) and "file write failed" in str(err):  # torch.save's C++ writer
            return OSError(errno.ENOSPC, str(err).splitlines()[0])
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def continue_in_run_dir(argv: list[str]) -> list[str]:
    """``ckpt_path=<run dir>/checkpoints/<file>`` continues that run in its own dir, as a resume: ModelCheckpoint
    restores its ranking, so the final test uses the best checkpoint over all steps, old and new; the CSV history
    is appended and run.json records the resume. The command line is left alone when it names a dir
    (``hydra.run.dir=`` / ``paths.output_dir=``: a new run starting from the checkpoint), starts a sweep, or the
    checkpoint is not inside a genlab run dir."""
    keys = {a.lstrip("+").split("=", 1)[0]: a.split("=", 1)[1] for a in argv if "=" in a and not a.startswith("-")}
    value = keys.get("ckpt_path")
    if not value or value == "last" or {"hydra.run.dir", "paths.output_dir"} & set(keys) or \
            any(a in ("-m", "--multirun") for a in argv):
        return argv
    ckpt = Path(value).expanduser().absolute()
    run = ckpt.parent.parent
    if not (ckpt.exists() and ckpt.parent.name == "checkpoints" and (run / RUN_FILE).is_file()):
        return argv
    return [*argv, f"hydra.run.dir={_override_value(str(run))}"]


def _override_value(text: str) -> str:
    """``text`` as a Hydra override value: quoted when it holds characters the override grammar reads."""
    if all(c.isalnum() or c in "/._-:+@" for c in text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def is_fresh(out: Path) -> bool:
    """``out`` holds nothing but what Hydra wrote on starting this process: a config error may remove it."""
    return out.is_dir() and all(p.name in HYDRA_START_FILES for p in out.iterdir())


def remove_unused(out: Path, log_dir: Path) -> bool:
    """Remove a run dir that a run stopped in before it trained (a config error): no checkpoint, nothing written
    but the start-up files; and its experiment folder below ``log_dir`` when that is left empty. Returns whether
    the run dir was removed."""
    ckpts = out / "checkpoints"
    if ckpts.is_dir() and any(ckpts.iterdir()):
        return False
    shutil.rmtree(out, ignore_errors=True)
    parent = out.parent.resolve()
    if parent != log_dir.resolve() and log_dir.resolve() in parent.parents:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            pass
    return not out.exists()
