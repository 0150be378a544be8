"""The Kubernetes launcher's tests, against the stand-in cluster of tests/k8s_standin/."""

from __future__ import annotations

import base64

from tests.k8s_standin import StandInCluster


def store_secret(cluster: StandInCluster, name: str, pods_env: dict[str, str]) -> str:
    """A Secret ``name`` of the namespace "ml" holding the pods' environment ``pods_env`` (a store's credentials),
    created through the cluster's API; its name."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig))
    data = {k: base64.b64encode(v.encode()).decode() for k, v in pods_env.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
    return api.create_namespaced_secret("ml", body).metadata.name
