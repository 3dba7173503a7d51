"""What an archive's members would make, decided from their names alone: one virtual tree.

The api's check and every unpack (the agent's, the CLI's) read an archive through
`archive_stream.read_archive`, which places each member here, so the api refuses
exactly what an unpack would. A member is admitted only as a regular file, a
directory, a hard link to a regular file earlier in the archive, or a symlink whose
target, resolved in this tree once every member is placed, stays inside it. Nothing
here touches a disk: `os.path.realpath` and the standard library's extraction filters
decide from the files already written, which is what CVE-2025-4517 (a chain of links
too long for realpath to follow) got past.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from typing import Literal, cast

# The kernel follows at most 40 links in one lookup (ELOOP); a longer chain never
# resolves on disk, so it is refused rather than followed further here.
MAX_LINK_HOPS = 40
_NAME_MAX, _PATH_MAX = 255, 4096
# Path components followed in resolving all of an archive's links (a second or two): a
# legitimate bundle needs a few per link; 10,000 links of 40 hops of 2,000 `..` would
# hold the api's check for many minutes.
_RESOLVE_STEPS = 1_000_000
_TYPES = {
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.DIRTYPE: "dir",
    tarfile.SYMTYPE: "symlink",
    tarfile.LNKTYPE: "hardlink",
}

Kind = Literal["file", "dir", "symlink", "hardlink"]


class BundleRejected(ValueError):
    """An archive or a directory that cannot be a bundle; the message names why."""


@dataclass(frozen=True)
class Limits:
    """Bounds on one bundle: its compressed bytes, its entries, its unpacked bytes."""

    max_bytes: int = 100 * 1024 * 1024
    max_files: int = 10_000
    max_unpacked_bytes: int = 1024 * 1024 * 1024


@dataclass(frozen=True)
class Placed:
    """One admitted member: where it goes ('/'-free parts) and what it is."""

    kind: Kind
    parts: tuple[str, ...]
    mode: int = 0o644  # a file's: 0o644 or 0o755, nothing else
    link: str = ""  # a symlink's target as written
    source: tuple[str, ...] = ()  # a hard link's earlier file


def shown(name: str) -> str:
    """A member's name for a message: whole, or its ends when very long."""
    return repr(name) if len(name) <= 160 else repr(f"{name[:100]}...{name[-40:]}")


def _parts(name: str, what: str) -> tuple[str, ...]:
    """`name`'s components ('.' and empty ones dropped), or BundleRejected naming `what`."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or "\\" in name:
        raise BundleRejected(
            f"{what} is an absolute path (or holds a backslash): names in "
            "a bundle are relative to its root; pack it with "
            "`cohort bundle push`"
        )
    if "\x00" in name:
        raise BundleRejected(f"{what} contains a NUL byte: rename it")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise BundleRejected(
            f"{what} contains '..': names must stay inside the bundle; "
            "pack it with `cohort bundle push`"
        )
    # fsencode: a name that is not UTF-8 reaches us with surrogates (surrogateescape).
    if (
        any(len(os.fsencode(part)) > _NAME_MAX for part in parts)
        or len(os.fsencode(name)) > _PATH_MAX
    ):
        raise BundleRejected(
            f"{what} is longer than a file name or path may be "
            f"({_NAME_MAX} bytes a component, {_PATH_MAX} in all): "
            "shorten it"
        )
    return parts


@dataclass
class MemberTree:
    """The tree an archive's members make, placed one by one in archive order."""

    nodes: dict[tuple[str, ...], str] = field(default_factory=lambda: {(): "dir"})
    links: dict[tuple[str, ...], tuple[str, str]] = field(default_factory=dict)
    steps: int = 0  # components followed so far by _resolve, against _RESOLVE_STEPS

    def place(self, member: tarfile.TarInfo) -> Placed | None:
        """Admit `member` (None: the root itself), or BundleRejected naming it and the fix."""
        name = shown(member.name)
        parts = _parts(member.name, f"member {name}")
        kind = cast("Kind | None", _TYPES.get(member.type))
        # A pax-sparse member keeps its regular type: its data is a map, not the file.
        if kind is None or member.sparse is not None:
            raise BundleRejected(
                f"member {name} is a device file, a fifo or a sparse or "
                "special entry; bundles hold regular files, directories "
                "and links only: leave it out"
            )
        if not parts:
            if kind == "dir":
                return None
            raise BundleRejected(f"member {name} names the bundle's root: rename it")
        self._check_parents(parts, name)
        existing = self.nodes.get(parts)
        if existing is not None and not (existing == kind == "dir"):
            raise BundleRejected(
                f"member {name} appears twice in the bundle (or names a "
                "directory other members are in): keep one"
            )
        if kind == "symlink":
            self._check_target(member.linkname, name)
            self.links[parts] = (member.linkname, name)
            self.nodes[parts] = "symlink"
            return Placed("symlink", parts, link=member.linkname)
        if kind == "hardlink":
            source = _parts(member.linkname, f"the target of hard link {name}")
            if self.nodes.get(source) != "file":
                raise BundleRejected(
                    f"member {name} is a hard link to "
                    f"{shown(member.linkname)}, which is not a regular file "
                    "earlier in the bundle: store the file itself"
                )
            self.nodes[parts] = "file"
            return Placed("hardlink", parts, source=source)
        self.nodes[parts] = kind
        # Only the owner's execute bit carries over: no setuid, setgid, sticky or
        # group/world write, whatever the header says.
        mode = 0o755 if member.mode & 0o100 else 0o644
        return Placed(kind, parts, mode=mode if kind == "file" else 0o755)

    def _check_parents(self, parts: tuple[str, ...], name: str) -> None:
        for depth in range(1, len(parts)):
            kind = self.nodes.setdefault(parts[:depth], "dir")  # implied directories
            if kind == "symlink":
                raise BundleRejected(
                    f"member {name} is beneath {shown('/'.join(parts[:depth]))}, a link in "
                    "the bundle: nothing may be placed through a link; put it under the "
                    "link's target instead"
                )
            if kind != "dir":
                raise BundleRejected(
                    f"member {name} is beneath {shown('/'.join(parts[:depth]))}, a file: rename one"
                )

    @staticmethod
    def _check_target(target: str, name: str) -> None:
        if (
            not target
            or target.startswith("/")
            or "\x00" in target
            or len(os.fsencode(target)) >= _PATH_MAX
        ):
            raise BundleRejected(
                f"member {name} links to {shown(target)}, outside the "
                "bundle (empty, absolute or too long): copy the file in "
                "or leave the link out"
            )

    def finish(self) -> None:
        """Resolve every symlink now that all members are placed; BundleRejected names the
        first whose target leaves the tree or that starts a chain too long to follow."""
        for parts, (target, name) in self.links.items():
            self._resolve(parts, target, name)

    def _resolve(self, link: tuple[str, ...], target: str, name: str) -> None:
        where = list(link[:-1])
        pending = list(reversed(target.split("/")))
        hops = 0
        while pending:
            part = pending.pop()
            self.steps += 1
            if self.steps > _RESOLVE_STEPS:
                raise BundleRejected(
                    f"member {name}: following the bundle's links takes "
                    f"more than {_RESOLVE_STEPS} steps; point links at "
                    "their targets directly"
                )
            if part in ("", "."):
                continue
            if part == "..":
                if not where:
                    raise BundleRejected(
                        f"member {name} links to {shown(target)}, outside the bundle once "
                        "its links are followed: point it inside or leave it out"
                    )
                where.pop()
                continue
            where.append(part)
            # A missing name resolves lexically: only a link can move `where` elsewhere.
            if self.nodes.get(tuple(where)) == "symlink":
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise BundleRejected(
                        f"member {name} starts a chain of more than {MAX_LINK_HOPS} links "
                        "(or a loop): point it at its target directly"
                    )
                next_target = self.links[tuple(where)][0]
                where.pop()
                pending.extend(reversed(next_target.split("/")))
