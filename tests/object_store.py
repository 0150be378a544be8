"""A throw-away S3-protocol server for the tests: moto's server mode, its own process on a free port of every
address of this machine (pods of the stand-in cluster reach it at the bridge's), reached over HTTP by s3fs and boto3
as a real bucket would be. What it does not model: IAM (any key is accepted, unless ``authenticated``: then no key
is), eventual consistency (S3 has been strongly consistent since 2020), and latency."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

from tfdist.operators.launchers.processes import free_ports

KEY = "tfdist-test"


def airflow_connection(endpoint: str) -> str:
    """An Airflow connection (``AIRFLOW_CONN_<ID>``'s JSON) to the S3 server at ``endpoint``, with the tests' key."""
    extra = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    return json.dumps({"conn_type": "aws", "login": KEY, "password": KEY, "extra": extra})


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
        return airflow_connection(self.endpoint)

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


class StoreProxy:
    """A TCP relay on 127.0.0.1 in front of the S3 server, for faults: ``cut`` makes the store unreachable
    (connections open through it are reset, new ones refused) until ``mend``; ``delay`` seconds pass before each
    chunk a client sends is relayed (a slow link)."""

    def __init__(self, upstream_port: int, delay: float = 0.0) -> None:
        (self.port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.upstream_port, self.delay = upstream_port, delay
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.mend()

    def mend(self) -> None:
        """Accept connections again."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        if self.listener:
            self.listener.close()
            self.listener = None
        with self.lock:
            for sock in self.connections:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.connections.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self.lock:
                self.connections |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream, self.delay), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, 0.0), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, delay: float) -> None:
        try:
            while chunk := source.recv(65536):
                time.sleep(delay)
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self.lock:
                self.connections -= {source, target}

    def close(self) -> None:
        self.cut()
