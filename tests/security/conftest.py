"""Attack tests, one file per trust boundary (docs/security.md). The api attacks reuse
the api tests' client: every request inside the test's rolled-back transaction."""

from tests.api.conftest import client

__all__ = ["client"]
