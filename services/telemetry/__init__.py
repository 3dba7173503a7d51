"""Telemetry: metric points and log lines stored once, read back, downsampled; live feeds for
SSE clients; progress; the Prometheus collector and the dashboard's read-only summaries."""
