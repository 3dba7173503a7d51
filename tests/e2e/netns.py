"""Two "machines" on one host: network namespaces joined by veth pairs, made and removed here.

    host ──veth── ns a        control network: each namespace reaches the host's
    host ──veth── ns b        Redis through its own link (10.231.T.0/30, .4/30)
    ns a ──veth── ns b        cluster network: the replicas' TF_CONFIG addresses (10.232.T.0/30)

Point-to-point links rather than a bridge, so nothing depends on the host's
forwarding or bridge-netfilter settings. A machine's control link can be cut and
healed (`cut`, `heal`): its processes run on, only its network to the host goes.

Names carry a random tag, so runs side by side (and a run after one that died before
removing its namespaces) never meet; the subnet T is chosen under a lock among those
no host interface uses.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Held while a run picks its subnet and puts its addresses on the host: then the next
# run sees them taken.
_LOCK = Path("/run/lock/cohort-test-netns.lock")


class NamespacesUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no `ip`, no kernel support)."""


@dataclass(frozen=True)
class Machine:
    netns: str
    control_address: str  # where it reaches the host
    address: str  # where the other machine reaches it (COHORT_NODE_ADDRESS)
    host_link: str  # the host's end of its control link

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(
            done.returncode, ["ip", *args], done.stdout, done.stderr
        )
    return done.stdout


def cut(machine: Machine) -> None:
    """Take the machine's control link down: nothing it sends reaches the host, nor the
    reverse (its link to the other machine stays)."""
    _ip("link", "set", machine.host_link, "down")


def heal(machine: Machine) -> None:
    """Bring the machine's control link back (its addresses and route come back with it)."""
    _ip("link", "set", machine.host_link, "up")


def _free_subnet() -> int:
    """A T no host address of 10.231.T.x or 10.232.T.x uses (lock held)."""
    used = {int(t) for t in re.findall(r"\binet 10\.23[12]\.(\d+)\.", _ip("-o", "-4", "addr"))}
    free = [t for t in range(250) if t not in used]
    if not free:
        raise NamespacesUnavailable("every 10.231.T.0/24 test subnet is in use")
    return free[secrets.randbelow(len(free))]


@contextmanager
def two_machines() -> Iterator[tuple[list[str], list[Machine]]]:
    """Yield the host's control addresses and two namespaced machines; remove all after."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise NamespacesUnavailable("network namespaces need root and iproute2's `ip`")
    tag = secrets.token_hex(3)  # interface names: at most 15 characters
    names = [f"cohort{tag}a", f"cohort{tag}b"]
    made: list[str] = []  # namespaces; deleting one deletes its veth ends and their peers
    try:
        _LOCK.parent.mkdir(parents=True, exist_ok=True)
        with open(_LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            t = _free_subnet()
            for name in names:
                _ip("netns", "add", name)
                made.append(name)
                _ip("-n", name, "link", "set", "lo", "up")
            hosts = [f"10.231.{t}.1", f"10.231.{t}.5"]
            machines = []
            for i, name in enumerate(names):
                host_if, ns_if = f"coh{tag}h{i}", f"coh{tag}c{i}"
                _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", name)
                _ip("addr", "add", f"{hosts[i]}/30", "dev", host_if)
                _ip("link", "set", host_if, "up")
                control = f"10.231.{t}.{2 + 4 * i}"
                _ip("-n", name, "addr", "add", f"{control}/30", "dev", ns_if)
                _ip("-n", name, "link", "set", ns_if, "up")
                machines.append(Machine(name, control, f"10.232.{t}.{1 + i}", host_if))
        _ip(
            "-n",
            names[0],
            "link",
            "add",
            f"coh{tag}x0",
            "type",
            "veth",
            "peer",
            "name",
            f"coh{tag}x1",
            "netns",
            names[1],
        )
        for i, name in enumerate(names):
            _ip("-n", name, "addr", "add", f"{machines[i].address}/30", "dev", f"coh{tag}x{i}")
            _ip("-n", name, "link", "set", f"coh{tag}x{i}", "up")
    except subprocess.CalledProcessError as exc:
        _remove(made, tag)
        raise NamespacesUnavailable(f"`{' '.join(exc.cmd)}` failed: {exc.stderr.strip()}") from exc
    except BaseException:
        _remove(made, tag)
        raise
    try:
        yield hosts, machines
    finally:
        _remove(made, tag)


def _remove(namespaces: list[str], tag: str) -> None:
    for name in namespaces:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    for i in range(2):  # host ends normally vanish with their peers; make sure
        subprocess.run(["ip", "link", "del", f"coh{tag}h{i}"], capture_output=True, check=False)
