"""The api process: FastAPI, the REST API v1, the live streams (SSE) and the dashboard.
Imports `services`, never `workers`.

    main.py             create_app(): the routers, middleware and error mapping, assembled
    routes/             one router per resource, and the dashboard's pages
    deps.py             the SQL session, the settings, the caller's token and scope rule
    credentials.py      who is calling (bearer or session cookie), a token's use, a stream's
    errors.py           domain errors and validation failures mapped to JSON answers
    openapi.py          the OpenAPI document: bearer scheme, every error status
    docs.py             `GET /docs`: Swagger UI from the copy shipped in static/vendor/
    params.py           the range each kind of id and bounded integer may take
    json_body.py        JSON bodies with finite numbers only
    body_limit.py       request bodies bounded before they are read (MAX_REQUEST_BYTES)
    uploads.py          a large body received into a spooled upload
    csrf.py             cross-site refusal for cookie-authenticated unsafe requests
    security_headers.py the headers every response carries (CSP and the rest)
    login_throttle.py   failed dashboard logins counted per client address
    stream_limits.py    open live streams per token (MAX_STREAMS_PER_TOKEN)

Templates in templates/, scripts, styles and vendored assets in static/ (no CDN).
"""
