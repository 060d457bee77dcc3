"""Opening files in directories code under test can write, without following anything it planted there.

Trials write their own dir, the JIT dirs and scratch; build steps write their cache entry. A path
into such a dir is a path the code under test steers: a `log.txt` turned into a symlink to an
ancestor's `/proc/<pid>/environ`, a `trials/<sha>` dir turned into a symlink to the bot's package,
a FIFO that blocks a read for ever. So the bot never hands such a path to `open`: it walks from a
directory it opened itself (a `SafeDir`, an fd), one component at a time with O_NOFOLLOW, and
checks with fstat what it opened (a directory, or a regular file with one link, nothing else).
A symlink, FIFO, device or hard link planted there is refused (`Refused`), never followed.

What this does not stop: code under test rewriting a regular file it may write (its own log),
or another trial's files where trials share one sandbox; those are its own output, read as such.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO opens, and is then refused
NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(OSError):
    """What is there is not what the bot made (a link, a FIFO, a hard link, a file where a dir was)."""


def _component(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise Refused(errno.EINVAL, f"not a plain name: {name!r}")
    return name


def _parts(rel: str | Path) -> list[str]:
    parts = [p for p in Path(rel).parts if p not in ("", ".")]
    if not parts or Path(rel).is_absolute():
        raise Refused(errno.EINVAL, f"not a relative path: {str(rel)!r}")
    return [_component(p) for p in parts]


class SafeDir:
    """An open directory the bot reached without following a link; everything below is opened from it."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, Path(path)

    @classmethod
    def open(cls, root: str | Path, *parts: str, create: bool = False) -> SafeDir:
        """`root` (the bot's own dir, opened by its path), then `parts` below it without following
        links (made where missing when `create`, and then a link or file planted at one replaced
        by a dir)."""
        root = Path(root)
        if create:
            root.mkdir(parents=True, exist_ok=True)
        here = cls(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), root)
        try:
            for part in parts:
                nxt = here.sub(part, create=create, clear_other=create)
                here.close()
                here = nxt
        except BaseException:
            here.close()
            raise
        return here

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SafeDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    # -- directories -----------------------------------------------------------------------------

    def sub(self, name: str, create: bool = False, clear_other: bool = False) -> SafeDir:
        """The directory `name` here (made when missing and `create`). `clear_other`: whatever else
        stands at that name (a symlink, a file: planted) is removed first and a dir made in its place."""
        name = _component(name)
        if create:
            try:
                os.mkdir(name, 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if not (clear_other and create and exc.errno in (errno.ELOOP, errno.ENOTDIR)):
                raise Refused(exc.errno, f"{self.path / name}: not a directory the bot made ({exc.strerror})") from exc
            os.unlink(name, dir_fd=self.fd)  # removes the link itself, never its target
            return self.sub(name, create=True)
        return SafeDir(fd, self.path / name)

    def fresh(self, name: str) -> SafeDir:
        """A directory made now, by the bot, at `name` (an error if anything is there)."""
        name = _component(name)
        os.mkdir(name, 0o755, dir_fd=self.fd)
        return self.sub(name)

    def walk(self, rel: str | Path) -> SafeDir:
        """The directory at the relative path `rel` below this one, no component followed."""
        here: SafeDir = self
        for part in _parts(rel):
            nxt = here.sub(part)
            if here is not self:
                here.close()
            here = nxt
        return here

    def remove(self, name: str) -> None:
        """Remove `name` here, a tree without following its links (a link: the link only)."""
        name = _component(name)
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=self.fd, ignore_errors=True)
        else:
            try:
                os.unlink(name, dir_fd=self.fd)
            except FileNotFoundError:
                pass

    def rename(self, name: str, to: str) -> bool:
        """Rename `name` to `to` in this dir (a link is renamed, not followed); False when `name` is gone."""
        try:
            os.rename(_component(name), _component(to), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    # -- files -----------------------------------------------------------------------------------

    def open_file(self, rel: str | Path) -> int:
        """A read fd of the regular file at `rel`, reached and opened without following a link;
        Refused for anything else (a link anywhere on the way, a FIFO, a device, a hard link)."""
        *dirs, name = _parts(rel)
        parent = self.walk(Path(*dirs)) if dirs else self
        try:
            try:
                fd = os.open(name, READ_FLAGS, dir_fd=parent.fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: what O_NOFOLLOW gives on some systems
                    raise Refused(exc.errno, f"{parent.path / name}: a symbolic link, not followed") from exc
                raise
        finally:
            if parent is not self:
                parent.close()
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            what = "a hard link" if stat.S_ISREG(st.st_mode) else "not a regular file"
            raise Refused(errno.EPERM, f"{self.path / rel}: {what}, not read")
        os.set_blocking(fd, True)
        return fd

    def read(self, rel: str | Path, limit: int | None = None) -> bytes:
        """The regular file at `rel` (its first `limit` bytes)."""
        fd = self.open_file(rel)
        with os.fdopen(fd, "rb") as fh:
            return fh.read() if limit is None else fh.read(limit)

    def tail(self, rel: str | Path, size: int) -> bytes:
        """The last `size` bytes of the regular file at `rel`."""
        fd = self.open_file(rel)
        with os.fdopen(fd, "rb") as fh:
            end = os.fstat(fd).st_size
            fh.seek(max(0, end - size))
            return fh.read(size)

    def create(self, name: str, data: bytes = b"", mode: int = 0o644) -> None:
        """A new file `name` holding `data`: made here by the bot (an error if anything is there)."""
        fd = os.open(_component(name), NEW_FLAGS, mode, dir_fd=self.fd)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def replace(self, name: str, data: bytes, mode: int = 0o644) -> None:
        """`name` replaced whole by a new file holding `data`: written under a fresh name, then
        renamed over it (a rename replaces a link itself, never writes where it points)."""
        tmp = f".{_component(name)}.{uuid.uuid4().hex}.tmp"
        self.create(tmp, data, mode)
        try:
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.remove(tmp)
            raise

    def exists(self, name: str) -> bool:
        """Whether anything (a link included) stands at `name`."""
        try:
            os.stat(_component(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def mtime(self, name: str) -> float | None:
        """When the regular file `name` was last modified; None when it is missing or not one."""
        try:
            st = os.stat(_component(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return st.st_mtime if stat.S_ISREG(st.st_mode) else None


def read_regular(path: str | Path, limit: int | None = None) -> bytes | None:
    """The file at `path` if its last component is a regular, singly linked file (not a link, FIFO
    or device); None otherwise. For files found by a walk that followed no directory link
    (`os.walk`, `Path.rglob`) under a root checked with `is_real_dir`."""
    path = Path(path)
    try:
        with SafeDir.open(path.parent) as parent:
            return parent.read(path.name, limit)
    except OSError:
        return None


def is_real_dir(path: str | Path) -> bool:
    """A directory itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


__all__ = ["Refused", "SafeDir", "is_real_dir", "read_regular"]
