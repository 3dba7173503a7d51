"""Server-side request forgery: the URLs and addresses a webhook may be sent to
(services/webhooks/targets.py). Literal addresses need no resolver; `localhost.` is
resolved by the machine's own (its hosts file)."""

from __future__ import annotations

import ipaddress

import pytest

from services.webhooks.targets import Blocked, address_problem, allowed_networks, check_url

ATTACKS = [
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://10.0.0.1/hook", "private"),
    ("http://192.168.1.10:8080/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://127.0.0.1:6379/", "loopback"),
    ("http://[::1]/hook", "loopback"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fd00::1]/", "private"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://224.0.0.1/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://100.64.0.1/", "not a public address"),
    ("http://[::ffff:127.0.0.1]/", "IPv6 form of 127.0.0.1"),
    ("http://[::ffff:169.254.169.254]/", "IPv6 form of 169.254.169.254"),
    ("http://[::127.0.0.1]/", "IPv6 form of 127.0.0.1"),
    ("http://[2002:7f00:1::]/", "IPv6 form of 127.0.0.1"),  # 6to4
    ("http://2130706433/", "numeric spelling"),
    ("http://0x7f.1/", "numeric spelling"),
    ("http://0177.0.0.1/", "numeric spelling"),
    ("http://127.1/", "numeric spelling"),
    ("http://0x7f000001/", "numeric spelling"),
    ("http://localhost./hook", "localhost resolves to"),
    ("http://LOCALHOST/hook", "localhost resolves to"),
    ("ftp://example.com/", "http:// or https://"),
    ("file:///etc/passwd", "http:// or https://"),
    ("gopher://127.0.0.1:6379/", "http:// or https://"),
    ("http://user:pass@example.com/", "credentials"),
    ("http://:80/", "no host"),
    ("http://example.com:99999/", "not a URL"),
]


@pytest.mark.parametrize(("url", "why"), ATTACKS, ids=[a for a, _ in ATTACKS])
def test_an_internal_or_odd_target_is_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(Blocked) as refused:
        check_url(url, allowed=[])
    assert why in str(refused.value)


def test_a_public_address_passes_with_its_port_and_host() -> None:
    target = check_url("https://93.184.215.14/hooks?x=1", allowed=[])
    assert (target.scheme, target.host, target.port) == ("https", "93.184.215.14", 443)
    assert target.address == ipaddress.ip_address("93.184.215.14")
    v6 = check_url("http://[2606:4700::6810:85e5]:8080/h", allowed=[])
    assert (v6.port, str(v6.address)) == (8080, "2606:4700::6810:85e5")


def test_an_allowed_network_lets_its_addresses_through_and_no_others() -> None:
    allowed = allowed_networks("127.0.0.1/32, 10.20.0.0/16")
    assert check_url("http://127.0.0.1:9000/h", allowed).port == 9000
    assert check_url("http://localhost./h", allowed).address == ipaddress.ip_address("127.0.0.1")
    assert check_url("http://10.20.3.4/h", allowed)
    for url in ("http://127.0.0.2/", "http://10.21.0.1/", "http://[::1]/", "http://0x7f.1/"):
        with pytest.raises(Blocked):
            check_url(url, allowed)
    # An IPv4 address dressed as IPv6 stays refused even when the IPv4 one is allowed.
    assert address_problem(ipaddress.ip_address("::ffff:127.0.0.1"), allowed)


def test_a_bad_allowed_network_setting_is_an_error() -> None:
    with pytest.raises(ValueError):
        allowed_networks("127.0.0.1/33")
    assert allowed_networks("") == []
