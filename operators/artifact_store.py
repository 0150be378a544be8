"""The Airflow side's access to artifacts in an object store: credentials from the Airflow connection named in
``[tfdist]`` (``aws_conn_id``, default ``aws_default``), read through the Amazon provider's own hook. They are
set for this process's reads and writes (``storage.configure``) and handed to the local launcher's processes in
their environment, never their argv. Pods use their own identity (a service account: docs/object-storage.md)."""

from __future__ import annotations

import threading
import time
from typing import Any

from tfdist.contract import storage
from tfdist.operators.provider_info import CONFIG


class StoreUnreachable(RuntimeError):
    """The artifact root's store refused this process's credentials, or cannot be reached."""


def s3_connection_id() -> str:
    """The Airflow connection of s3:// roots: ``[tfdist] aws_conn_id``."""
    from airflow.configuration import conf

    default = CONFIG["tfdist"]["options"]["aws_conn_id"]["default"]
    return conf.get("tfdist", "aws_conn_id", fallback=default) or default


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
    endpoint, region = hook.conn_config.endpoint_url, hook.conn_region_name
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


RECONNECT_SECONDS = 600
"""How long a connection's credentials are used before they are read again: a role's session credentials
expire (an hour by default), and the API server runs for weeks."""

_connected: dict[str, tuple[float, dict[str, str]]] = {}
_connecting = threading.Lock()


def connect(*roots: str) -> dict[str, str]:
    """Set this process's credentials for the stores of ``roots`` and check that they reach them (at most every
    RECONNECT_SECONDS); the environment that gives a local worker process the same access (none for local
    roots). StoreUnreachable names the connection and the fix."""
    env: dict[str, str] = {}
    with _connecting:
        for root in roots:
            at, root_env = _connected.get(root, (-RECONNECT_SECONDS, {}))
            if time.monotonic() - at >= RECONNECT_SECONDS:
                root_env = _connect(root)
                _connected[root] = (time.monotonic(), root_env)
            env.update(root_env)
    return env


def _connect(root: str) -> dict[str, str]:
    scheme = storage.scheme(root)
    if scheme is None:
        return {}
    if scheme != "s3":
        raise StoreUnreachable(f"{root}: the Airflow side reaches only s3:// roots so far")
    conn_id, bucket = s3_connection_id(), root.split("://", 1)[1].split("/", 1)[0]
    try:
        options, env = _s3_credentials(conn_id)
        storage.configure(scheme, options)
        fs, _ = storage.filesystem(root)
        fs.ls(bucket, detail=False)  # raises where the store refuses the credentials (exists() would say False)
    except FileNotFoundError:
        missing = f"{root}: there is no bucket {bucket!r} (or the connection {conn_id!r} may not see it)"
        raise StoreUnreachable(missing) from None
    except Exception as exc:
        raise StoreUnreachable(
            f"cannot reach {root} with the Airflow connection {conn_id!r} ([tfdist] aws_conn_id): "
            f"{type(exc).__name__}: {str(exc).rstrip('.')}. Check the connection's credentials, endpoint and region"
        ) from None
    return env
