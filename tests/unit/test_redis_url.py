"""One Redis URL for every client: passwords hidden in messages, TLS for Celery's broker."""

from __future__ import annotations

import ssl

import pytest

from services.wire.client import celery_broker, redacted
from workers.celery_app import make_celery


def test_a_password_never_shows() -> None:
    assert redacted("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert (
        redacted("rediss://cohort:p%40ss@10.0.0.5:6380/2?ssl_ca_certs=/ca.pem")
        == "rediss://cohort:***@10.0.0.5:6380/2?ssl_ca_certs=/ca.pem"
    )
    assert redacted("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_a_plain_url_is_the_broker_as_is() -> None:
    assert celery_broker("redis://:pw@redis:6379/0") == ("redis://:pw@redis:6379/0", None)


def test_tls_parameters_move_into_broker_use_ssl() -> None:
    url, tls = celery_broker(
        "rediss://:pw@redis:6380/0?ssl_ca_certs=/etc/ca.pem"
        "&ssl_certfile=/c.crt&ssl_keyfile=/c.key&health_check_interval=5"
    )
    assert url == "rediss://:pw@redis:6380/0?health_check_interval=5"
    assert tls == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": "/etc/ca.pem",
        "ssl_certfile": "/c.crt",
        "ssl_keyfile": "/c.key",
    }
    # kombu alone would not check the certificate; the broker checks it unless told not.
    assert celery_broker("rediss://redis:6380/0")[1] == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert celery_broker("rediss://redis:6380/0?ssl_cert_reqs=none")[1] == {
        "ssl_cert_reqs": ssl.CERT_NONE
    }
    with pytest.raises(ValueError, match="ssl_cert_reqs='maybe'"):
        celery_broker("rediss://redis:6380/0?ssl_cert_reqs=maybe")


def test_the_celery_app_dials_with_tls() -> None:
    app = make_celery("rediss://:pw@redis:6380/0?ssl_ca_certs=/etc/ca.pem")
    assert app.conf.broker_url == "rediss://:pw@redis:6380/0"
    assert app.conf.broker_use_ssl == {
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_ca_certs": "/etc/ca.pem",
    }
