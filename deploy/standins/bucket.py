"""The stand-in's one-shot (for minio/mc's `mc mb --ignore-existing`): make the bucket,
kept if it exists.  python bucket.py ENDPOINT BUCKET (credentials from AWS_*)."""

from __future__ import annotations

import sys

import boto3


def main(endpoint: str, bucket: str) -> None:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    sys.stdout.write(f"stand-in bucket: {bucket} at {endpoint}\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
