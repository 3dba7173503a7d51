"""Archives a hostile client could upload, one per refusal the bundle checks make."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable


def tar_gz(add: Callable[[tarfile.TarFile], None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        add(tar)
    return buffer.getvalue()


class Zeros(io.RawIOBase):
    """`size` zero bytes, read without ever holding them (a bundle that unpacks to far
    more than it weighs: tests/security/test_bundle_check_blocks_nothing.py,
    bench/bundle_check.py)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


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


def _dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _link(tar: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tar.addfile(info)


def realpath_overflow(dest_len: int = 48, hard_link: bool = False) -> bytes:
    """CVE-2025-4517, built as CPython's test_tarfile `test_realpath_limit_attack` builds
    it: 16 directories of names long enough that, unpacked at a destination path of
    `dest_len` characters, the path a chain of links expands to overflows PATH_MAX, so
    os.path.realpath stops resolving and the "data" filter passes the link `escape` that
    points one level above the destination. Then a regular file is written through it
    (`escape/newfile`); `hard_link`: first CPython's hard link to `escape/flag`, and a
    file of the same name that overwrites it."""
    steps = "abcdefghijklmnop"
    component = "d" * ((4096 - (dest_len + 1)) // (len(steps) + 1))

    def add(tar: tarfile.TarFile) -> None:
        path = ""
        for step in steps:
            _dir(tar, f"{path}{component}", 0o777)
            _link(tar, f"{path}{step}", component)
            path = f"{path}{component}/"
        longest = "/".join(steps) + "/" + "l" * 254
        _link(tar, longest, "/".join([".."] * len(steps)))
        _link(tar, "escape", f"{longest}/..")
        if hard_link:
            _link(tar, "flaglink", "escape/flag", tarfile.LNKTYPE)
            _file(tar, "flaglink", b"overwrite")
        _file(tar, "escape/newfile", b"new")

    return tar_gz(add)


# The member the realpath-overflow archive is refused at: the first placed through a link.
OVERFLOW_MEMBER = "a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/llll"


def link_chain_out() -> bytes:
    """`sub/l -> ..` is the root; `sub/l/x -> ..` then is the root's parent."""

    def add(tar: tarfile.TarFile) -> None:
        _file(tar, "train.py", b"print(1)\n")
        _link(tar, "sub/l", "..")
        _link(tar, "sub/l/x", "..")
        _file(tar, "sub/l/x/escaped.txt", b"out")

    return tar_gz(add)


def link_through_link_out() -> bytes:
    """Each name alone stays inside (`d/up/..` is `d` by its letters), followed it leaves:
    `d/up` is the root, so `d/up/..` is the root's parent."""

    def add(tar: tarfile.TarFile) -> None:
        _dir(tar, "d")
        _link(tar, "d/up", "..")
        _link(tar, "esc", "d/up/..")

    return tar_gz(add)


def beneath_link() -> bytes:
    """A file placed through an in-tree link (`lib -> pkg`, then `lib/evil.py`)."""

    def add(tar: tarfile.TarFile) -> None:
        _dir(tar, "pkg")
        _link(tar, "lib", "pkg")
        _file(tar, "lib/evil.py", b"x")

    return tar_gz(add)


def hard_link_to(kind: str) -> bytes:
    """A hard link to a later file, a directory or a symlink: never to an earlier file."""

    def add(tar: tarfile.TarFile) -> None:
        if kind == "later":
            _link(tar, "h", "later.txt", tarfile.LNKTYPE)
            _file(tar, "later.txt")
        elif kind == "dir":
            _dir(tar, "d")
            _link(tar, "h", "d", tarfile.LNKTYPE)
        else:
            _file(tar, "train.py")
            _link(tar, "s", "train.py")
            _link(tar, "h", "s", tarfile.LNKTYPE)

    return tar_gz(add)


def name_twice() -> bytes:
    """A hard link, then a file of its name (CPython's overwrite through a hard link)."""

    def add(tar: tarfile.TarFile) -> None:
        _file(tar, "a.txt", b"first")
        _link(tar, "h", "a.txt", tarfile.LNKTYPE)
        _file(tar, "h", b"overwrite")

    return tar_gz(add)


def link_loop() -> bytes:
    return tar_gz(lambda tar: (_link(tar, "a", "b"), _link(tar, "b", "a")))  # type: ignore[func-returns-value]


def _raw(blocks: bytes) -> bytes:
    return gzip.compress(blocks, mtime=0)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def size_lie() -> bytes:
    """A header declaring 1 byte followed by 600: the rest would be read as headers."""
    return _raw(_header("train.py", 1) + (b"x" * 600).ljust(1024, b"\0") + b"\0" * 1024)


def truncated() -> bytes:
    """A header declaring 1000 bytes, then 10 and the end of the stream."""
    return _raw(_header("train.py", 1000) + b"x" * 10)


def huge_header() -> bytes:
    """A GNU long name of 8 MiB: a header tarfile would hold in memory whole."""
    return tar_gz(lambda tar: _file(tar, "n" * (8 << 20)))


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
    "symlink outside": (
        lambda: tar_gz(_special("link", tarfile.SYMTYPE, "../../etc/passwd")),
        "outside",
    ),
    "absolute symlink": (
        lambda: tar_gz(_special("link", tarfile.SYMTYPE, "/etc/passwd")),
        "outside",
    ),
    "hard link outside": (
        lambda: tar_gz(_special("link", tarfile.LNKTYPE, "/etc/passwd")),
        "hard link",
    ),
    "char device": (lambda: tar_gz(_special("dev", tarfile.CHRTYPE)), "device"),
    "block device": (lambda: tar_gz(_special("dev", tarfile.BLKTYPE)), "device"),
    "fifo": (lambda: tar_gz(_special("pipe", tarfile.FIFOTYPE)), "fifo"),
    "not an archive": (lambda: b"this is not gzip at all", "not a readable"),
    "realpath overflow (CVE-2025-4517)": (realpath_overflow, f"member '{OVERFLOW_MEMBER}"),
    "realpath overflow with a hard link": (
        lambda: realpath_overflow(hard_link=True),
        f"member '{OVERFLOW_MEMBER}",
    ),
    "link chain out of the root": (link_chain_out, "member 'sub/l/x' is beneath 'sub/l'"),
    "link out through a link": (link_through_link_out, "member 'esc' links to 'd/up/..'"),
    "member beneath a link": (beneath_link, "member 'lib/evil.py' is beneath 'lib'"),
    "hard link to a later file": (lambda: hard_link_to("later"), "hard link"),
    "hard link to a directory": (lambda: hard_link_to("dir"), "hard link"),
    "hard link to a symlink": (lambda: hard_link_to("symlink"), "hard link"),
    "a name twice": (name_twice, "member 'h' appears twice"),
    "link loop": (link_loop, "chain of more than 40 links"),
    "declared size too small": (size_lie, "after member 'train.py'"),
    "truncated data": (truncated, "member 'train.py' is truncated"),
    "header out of proportion": (huge_header, "headers hold more than"),
}


def many_files(count: int) -> bytes:
    return tar_gz(lambda tar: [_file(tar, f"f{i}.txt") for i in range(count)])  # type: ignore[func-returns-value]


def big_unpacked(size: int) -> bytes:
    """Compresses to a few KiB, unpacks to `size` bytes."""
    return tar_gz(lambda tar: _file(tar, "zeros.bin", b"\0" * size))
