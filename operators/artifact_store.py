"""The Airflow side's access to artifacts in an object store: credentials from the Airflow connection named in
``[tfdist]`` (``aws_conn_id`` for s3://, read through the Amazon provider's own hook; ``gcp_conn_id`` for gs://,
a Google Cloud connection read by Airflow). They are set for this process's reads and writes
(``storage.configure``) and handed to the local launcher's processes in their environment, never their argv. Pods
use their own identity (a service account: docs/object-storage.md)."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from tfdist.infra import storage
from tfdist.operators.provider_info import CONFIG


class StoreUnreachable(RuntimeError):
    """The artifact root's store refused this process's credentials, or cannot be reached."""


CONNECTION_OPTIONS = {"s3": "aws_conn_id", "gs": "gcp_conn_id"}
"""The ``[tfdist]`` option naming the Airflow connection of each store's roots."""


def connection_id(protocol: str) -> str:
    """The Airflow connection of ``protocol``'s roots (its ``[tfdist]`` option, else the option's default)."""
    from airflow.configuration import conf

    option = CONNECTION_OPTIONS[protocol]
    default = CONFIG["tfdist"]["options"][option]["default"]
    return conf.get("tfdist", option, fallback=default) or default


def _s3_credentials(conn_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(s3fs's storage options, the standard AWS environment) from the connection: its keys (or, without any,
    the identity the Amazon provider finds: an instance role, IRSA), endpoint and region."""
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        raise StoreUnreachable(
            "an s3:// artifact root needs the Amazon provider on the Airflow side: pip install 'airflow-tfdist[s3]'"
        ) from None
    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
    credentials = hook.get_credentials()
    # the connection's region, else the one a client finds (making one takes a quarter of a second)
    endpoint, region = hook.conn_config.endpoint_url, hook.region_name or hook.conn_region_name
    options: dict[str, Any] = {
        "key": credentials.access_key,
        "secret": credentials.secret_key,
        "token": credentials.token,
        "client_kwargs": {k: v for k, v in (("endpoint_url", endpoint), ("region_name", region)) if v},
    }
    env = {
        "AWS_ACCESS_KEY_ID": credentials.access_key,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        "AWS_SESSION_TOKEN": credentials.token,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": region,
    }
    return options, {k: v for k, v in env.items() if v}


GCS_FIELDS = ("key_path", "keyfile_dict", "project", "scope", "num_retries")
"""The Google Cloud connection's fields tfdist reads (key_path, keyfile_dict, project) or may ignore."""


def _gcs_credentials(conn_id: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(gcsfs's storage options, the environment handing them to a worker) from the Google Cloud connection: its
    key file (``key_path``) or key (``keyfile_dict``) and project. Without a key, or without the connection, the
    identity gcsfs finds (application default credentials: GOOGLE_APPLICATION_CREDENTIALS, Workload Identity, the
    instance's service account). Other ways of signing in (impersonation, a key in a secret manager) are refused."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    if importlib.util.find_spec("gcsfs") is None:
        raise StoreUnreachable("a gs:// root needs gcsfs on the Airflow side: pip install 'airflow-tfdist[gcs]'")
    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson
    except AirflowNotFoundException:
        extra = {}
    fields = {k.removeprefix("extra__google_cloud_platform__"): v for k, v in extra.items() if v not in ("", None)}
    unread = sorted(set(fields) - set(GCS_FIELDS))
    if unread:
        raise StoreUnreachable(
            f"the Airflow connection {conn_id!r} signs in with {', '.join(unread)}, which tfdist does not read: give "
            "it a key (key_path or keyfile_dict), or none for the ambient identity"
        )
    options: dict[str, Any] = {"project": fields["project"]} if "project" in fields else {}
    if "key_path" in fields:
        return {**options, "token": fields["key_path"]}, {"GOOGLE_APPLICATION_CREDENTIALS": fields["key_path"]}
    if "keyfile_dict" in fields:
        key = fields["keyfile_dict"]
        key = json.loads(key) if isinstance(key, str) else key
        return {**options, "token": key}, {storage.GCS_KEY_ENV: json.dumps(key)}
    return options, {}


CREDENTIALS: dict[str, Callable[[str], tuple[dict[str, Any], dict[str, str]]]] = {
    "s3": _s3_credentials,
    "gs": _gcs_credentials,
}
"""Each store's (storage options, worker environment) from its Airflow connection."""


RECONNECT_SECONDS = 600
"""How long a connection's credentials are used before they are read again: a role's session credentials
expire (an hour by default), and the API server runs for weeks."""

Access = tuple[dict[str, str], dict[str, dict[str, Any]]]
"""What reaches some roots: (the environment variables, the storage options by protocol)."""

_connected: dict[str, tuple[float, Access]] = {}
_connecting = threading.Lock()


def connect(*roots: str) -> dict[str, str]:
    """Set this process's credentials for the stores of ``roots`` and check that they reach them (at most every
    RECONNECT_SECONDS); the environment that gives a local worker process the same access (none for local
    roots). StoreUnreachable names the connection and the fix."""
    return access(*roots)[0]


def access(*roots: str) -> Access:
    """``connect``; the environment and the storage options that give a local worker process the same access."""
    env: dict[str, str] = {}
    options: dict[str, dict[str, Any]] = {}
    with _connecting:
        for root in roots:
            at, (root_env, root_options) = _connected.get(root, (-RECONNECT_SECONDS, ({}, {})))
            if time.monotonic() - at >= RECONNECT_SECONDS:
                root_env, root_options = _connect(root)
                _connected[root] = (time.monotonic(), (root_env, root_options))
            env.update(root_env)
            options.update(root_options)
    return env, options


class HandedOptions:
    """Hands the storage options of the connection of ``roots`` to local stage processes in a file
    (``storage.OPTIONS_FILE_ENV``) kept as fresh as the connection: a thread reads it again every RECONNECT_SECONDS
    and rewrites the file when the credentials changed (an assumed role's last an hour; a training may take
    longer)."""

    CHECK_SECONDS = 5.0

    def __init__(self, path: str, roots: tuple[str, ...], log: Any) -> None:
        self.path, self.roots, self.log = path, roots, log
        self.handed: dict[str, dict[str, Any]] | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._keep_fresh, name="tfdist-handed-options", daemon=True)

    def __enter__(self) -> HandedOptions:
        self._hand()
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Stop renewing, and delete the file: its processes have ended."""
        self.done.set()
        self.thread.join()
        storage.remove(self.path)

    def _keep_fresh(self) -> None:
        while not self.done.wait(self.CHECK_SECONDS):
            try:
                self._hand()
            except StoreUnreachable as exc:  # the processes keep what they have, and retry their uploads
                self.log.warning("could not renew the stage processes' store credentials: %s", exc)

    def _hand(self) -> None:
        _, options = access(*self.roots)
        if options != self.handed:
            storage.write_options_file(self.path, options)
            self.handed = options


def _connect(root: str) -> Access:
    scheme = storage.scheme(root)
    if scheme is None:
        return {}, {}
    if scheme not in CREDENTIALS:
        raise StoreUnreachable(f"{root}: the Airflow side reaches s3:// and gs:// roots, not {scheme}://")
    conn_id, bucket = connection_id(scheme), root.split("://", 1)[1].split("/", 1)[0]
    try:
        options, env = CREDENTIALS[scheme](conn_id)
        storage.configure(scheme, options)
        fs, _ = storage.filesystem(root)
        if scheme == "gs":  # sign in once here: gcsfs's requests retry a refused sign-in for half a minute
            fs.credentials.maybe_refresh()
        fs.ls(bucket, detail=False)  # raises where the store refuses the credentials (exists() would say False)
    except StoreUnreachable:
        raise
    except FileNotFoundError:
        missing = f"{root}: there is no bucket {bucket!r} (or the connection {conn_id!r} may not see it)"
        raise StoreUnreachable(missing) from None
    except Exception as exc:
        raise StoreUnreachable(
            f"cannot reach {root} with the Airflow connection {conn_id!r} ([tfdist] {CONNECTION_OPTIONS[scheme]}): "
            f"{type(exc).__name__}: {str(exc).rstrip('.')}. Check the connection's credentials and settings"
        ) from None
    return env, {scheme: options}
