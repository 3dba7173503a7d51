"""A real S3-compatible server for tests: moto's standalone server as a child process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def moto_server(port: int) -> Iterator[str]:
    """Run `python -m moto.server` on 127.0.0.1:`port`; yields its endpoint URL."""
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **CREDENTIALS},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{endpoint}/moto-api/", timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create a bucket with boto3 (as an operator would, before pointing Cohort at it)."""
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        **{
            "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
        },
    ).create_bucket(Bucket=bucket)
