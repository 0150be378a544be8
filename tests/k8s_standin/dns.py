"""Cluster DNS, standing in: every pod's hosts file (bind-mounted at its /etc/hosts) holds the kubelet's lines
(localhost, the pod's own names) and the A records of the headless Services naming their ready pods."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster


def service_records(cluster: StandInCluster) -> list[tuple[str, str, list[str]]]:
    """(namespace, address, names relative to the namespace) of each pod a headless Service names: the
    Service's name, and ``<hostname>.<service>`` for pods whose subdomain is the Service. Call with the lock
    held."""
    records = []
    for (kind, ns, name), svc in cluster.objects.items():
        spec = svc.get("spec") or {}
        if kind != "Service" or spec.get("clusterIP") != "None" or not spec.get("selector"):
            continue
        for pod in cluster.pods.values():
            if (
                pod.namespace == ns
                and spec["selector"].items() <= pod.labels.items()
                and pod.serves(spec.get("publishNotReadyAddresses", False))
            ):
                records.append(
                    (ns, pod.address, [name] + ([f"{pod.hostname}.{name}"] if pod.subdomain == name else []))
                )
    return records


def write_hosts(cluster: StandInCluster) -> None:
    """Rewrite in place (the pods bind-mount these files) every pod's hosts file: the kubelet's (localhost,
    the pod's own names) and, standing in for cluster DNS, the A records of the headless Services."""
    with cluster.lock:
        records = service_records(cluster)
        for pod in cluster.pods.values():
            own = [f"{pod.hostname}.{pod.subdomain}.{pod.namespace}.svc.cluster.local"] if pod.subdomain else []
            lines = ["127.0.0.1 localhost", " ".join([pod.address, *own, pod.hostname])]
            for ns, address, names in records:
                qualified = [f"{n}.{ns}{suffix}" for n in names for suffix in (".svc.cluster.local", ".svc", "")]
                lines.append(" ".join([address, *qualified, *(names if ns == pod.namespace else [])]))
            overwrite(pod.hosts_path, "\n".join(lines) + "\n")


def overwrite(path: str, text: str) -> None:
    """Replace a bind-mounted file's text in place without ever showing a reader an empty file (a truncate then a
    write would, and a resolver reading then fails the lookup): one write from the start, padded with blanks to the
    old length. A read racing that one write may still see old and new bytes mixed; real cluster DNS has no file."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data.ljust(os.fstat(fd).st_size), 0)
    finally:
        os.close(fd)
