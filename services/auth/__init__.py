"""Who may do what: token scopes (`scopes.py`), API tokens issued, checked, expired and
revoked (`tokens.py`), tokens verified from a short in-process cache (`token_cache.py`),
the dashboard's login sessions (`sessions.py`), and the token API's request and response
shapes (`schemas.py`). Only digests of secrets are ever stored."""
