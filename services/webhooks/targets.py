"""Server-side request forgery: which webhook URLs and addresses the control plane sends to.

A webhook's URL is a project admin's choice, and the control plane sits inside the
cluster's network: unchecked, a webhook could make it POST to the cloud's metadata service
(169.254.169.254), Redis, the database or any private host. So a URL is checked at
creation and again at every attempt, against the address the attempt connects to: a name
that resolved to a public address yesterday may resolve to 127.0.0.1 today (DNS
rebinding), so the sender connects to the address checked here, never resolving again.

Refused, unless COHORT_WEBHOOK_ALLOWED_NETWORKS holds the address: anything not globally
routable (loopback, private, link-local, unique-local, unspecified, multicast, reserved,
shared, documentation ranges), the same hidden in IPv6 (IPv4-mapped, IPv4-compatible,
6to4, Teredo), and numeric spellings other than dotted decimal (2130706433, 0x7f.1,
0177.0.0.1), which resolvers read as addresses and people do not.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)", re.IGNORECASE)


class Blocked(Exception):
    """A URL or address a webhook may not be sent to; the message says why."""


@dataclass(frozen=True)
class Target:
    """Where one attempt goes: the URL as given, and the checked address to connect to."""

    url: str
    scheme: str
    host: str  # the name (or literal) for Host and TLS's server name
    port: int
    address: IPAddress


def allowed_networks(setting: str) -> list[Network]:
    """COHORT_WEBHOOK_ALLOWED_NETWORKS read ("a/n,b/m"); a bad entry raises ValueError."""
    return [ipaddress.ip_network(part.strip()) for part in setting.split(",") if part.strip()]


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, compatible, 6to4, Teredo)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    packed = address.packed
    # ::a.b.c.d, the deprecated IPv4-compatible form (:: and ::1 are IPv6's own).
    if packed[:12] == bytes(12) and int.from_bytes(packed[12:]) > 1:
        return ipaddress.IPv4Address(packed[12:])
    return None


def address_problem(address: IPAddress, allowed: list[Network]) -> str | None:
    """Why `address` may not be sent to, or None."""
    if isinstance(address, ipaddress.IPv6Address) and (inner := _embedded_ipv4(address)):
        # An IPv4 address in IPv6 clothing is refused outright: a receiver has no reason
        # to be given as one, and the allowance is for the address itself.
        return f"{address} is an IPv6 form of {inner}: give the address as it is"
    if any(address in network for network in allowed):
        return None
    for kind, flag in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),  # last: Python counts most of the above in it
    ):
        if flag:
            return f"{address} is a {kind} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def _parts(url: str) -> tuple[SplitResult, str, int]:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise Blocked(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise Blocked("give an http:// or https:// URL")
    if parts.username is not None or parts.password is not None:
        raise Blocked("credentials in the URL are refused: authenticate with the signature")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise Blocked("the URL has no host")
    if ":" not in host and all(_NUMERIC_LABEL.fullmatch(label) for label in host.split(".")):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise Blocked(f"{host!r} is a numeric spelling of an address: give a.b.c.d") from None
    return parts, host, port or (443 if parts.scheme == "https" else 80)


def check_url(url: str, allowed: list[Network]) -> Target:
    """The URL's first address, if the URL and every address its host has may be sent to.

    Raises:
        Blocked: why not.
    """
    parts, host, port = _parts(url)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    addresses = [literal] if literal is not None else _resolve(host, port)
    for address in addresses:
        # Every address: a name with one internal address among public ones would reach
        # it whenever the resolver put it first.
        if problem := address_problem(address, allowed):
            named = "" if literal is not None else f"{host} resolves to "
            raise Blocked(
                f"{named}{problem}; the cluster's COHORT_WEBHOOK_ALLOWED_NETWORKS may allow it"
            )
    return Target(url.strip(), parts.scheme, host, port, addresses[0])


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Blocked(f"{host} could not be resolved ({exc})") from None
    found: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    if not found:
        raise Blocked(f"{host} has no address")
    return found
