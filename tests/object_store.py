"""A throw-away S3-protocol server for the tests: moto's server mode, its own process on a free port of every
address of this machine (pods of the stand-in cluster reach it at the bridge's), reached over HTTP by s3fs and boto3
as a real bucket would be. What it does not model: IAM (any key is accepted, unless ``authenticated``: then no key
is), eventual consistency (S3 has been strongly consistent since 2020), and latency."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid

from tfdist.operators.launchers.processes import free_ports

KEY = "tfdist-test"


class S3Server:
    def __init__(self, authenticated: bool = False) -> None:
        """``authenticated``: every request after the first (creating a bucket) is refused, its key unknown."""
        self.authenticated = authenticated
        (self.port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """A worker's ambient identity for this server: the standard variables boto and s3fs read."""
        return self.env_at("127.0.0.1")

    def env_at(self, address: str) -> dict[str, str]:
        """``env`` for a process that reaches this machine at ``address`` (a pod of the stand-in cluster)."""
        return {
            "AWS_ENDPOINT_URL": f"http://{address}:{self.port}",
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    @property
    def options(self) -> dict:
        """s3fs's storage options for this server (what the Airflow side sets from a connection)."""
        return {"key": KEY, "secret": KEY, "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}

    @property
    def airflow_connection(self) -> str:
        """The Airflow connection (``AIRFLOW_CONN_<ID>``'s JSON) to this server."""
        extra = {"endpoint_url": self.endpoint, "region_name": "us-east-1"}
        return json.dumps({"conn_type": "aws", "login": KEY, "password": KEY, "extra": extra})

    def start(self) -> S3Server:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "0.0.0.0", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "1"} if self.authenticated else {})},
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.2)

    def client(self):
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=KEY, aws_secret_access_key=KEY, region_name="us-east-1"
        )

    def new_bucket(self) -> str:
        """A new empty bucket's name."""
        name = f"tfdist-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(10)
