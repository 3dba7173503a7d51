"""Archives a hostile client could upload, one per refusal the bundle checks make."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable


def tar_gz(add: Callable[[tarfile.TarFile], None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        add(tar)
    return buffer.getvalue()


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _special(name: str, kind: bytes, linkname: str = "") -> Callable[[tarfile.TarFile], None]:
    def add(tar: tarfile.TarFile) -> None:
        _file(tar, "train.py", b"print(1)\n")
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, linkname
        tar.addfile(info)
    return add


def good() -> bytes:
    """A small valid bundle: train.py and a data file in a directory."""
    def add(tar: tarfile.TarFile) -> None:
        _file(tar, "train.py", b"print('hello')\n")
        _file(tar, "data/rows.csv", b"a,b\n1,2\n")
    return tar_gz(add)


# name -> (archive bytes, a word the refusal must contain)
HOSTILE: dict[str, tuple[Callable[[], bytes], str]] = {
    "absolute path": (lambda: tar_gz(lambda t: _file(t, "/etc/cron.d/evil")), "absolute"),
    "dot-dot": (lambda: tar_gz(lambda t: _file(t, "code/../../evil.py")), ".."),
    "symlink outside": (lambda: tar_gz(_special("link", tarfile.SYMTYPE, "../../etc/passwd")),
                        "outside"),
    "absolute symlink": (lambda: tar_gz(_special("link", tarfile.SYMTYPE, "/etc/passwd")),
                         "outside"),
    "hard link outside": (lambda: tar_gz(_special("link", tarfile.LNKTYPE, "/etc/passwd")),
                          "hard link"),
    "char device": (lambda: tar_gz(_special("dev", tarfile.CHRTYPE)), "device"),
    "block device": (lambda: tar_gz(_special("dev", tarfile.BLKTYPE)), "device"),
    "fifo": (lambda: tar_gz(_special("pipe", tarfile.FIFOTYPE)), "fifo"),
    "not an archive": (lambda: b"this is not gzip at all", "not a readable"),
}


def many_files(count: int) -> bytes:
    return tar_gz(lambda tar: [_file(tar, f"f{i}.txt") for i in range(count)])  # type: ignore[func-returns-value]


def big_unpacked(size: int) -> bytes:
    """Compresses to a few KiB, unpacks to `size` bytes."""
    return tar_gz(lambda tar: _file(tar, "zeros.bin", b"\0" * size))
