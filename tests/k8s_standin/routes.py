"""The Kubernetes REST API over HTTP, as the real ``kubernetes`` client speaks it: discovery, get, list and
watch (``streams``) of Jobs, Services, ConfigMaps, Secrets, pods and the installed custom resources, events,
pod logs, create, delete (with propagation) and eviction; each request counted by verb and resource, and
refused 403 when RBAC (``forbidden``) denies its verb."""

from __future__ import annotations

import copy
import http.server
import json
import os
import re
import time
import urllib.parse
from typing import TYPE_CHECKING

from tests.k8s_standin import discovery, streams
from tests.k8s_standin.common import API_VERSIONS, flag, log_lines, selected

if TYPE_CHECKING:
    from tests.k8s_standin.cluster import StandInCluster

ROUTES = [
    (re.compile(p), kind)
    for p, kind in (
        (r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?(?:/status)?$", "Job"),
        (r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$", "Service"),
        (r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/status)?$", "Pod"),
        (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(log)$", "Log"),
        (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(eviction)$", "Eviction"),
        (r"^/api/v1/namespaces/([^/]+)/events$", "Event"),
        (r"^/api/v1/namespaces/([^/]+)/configmaps(?:/([^/]+))?$", "ConfigMap"),
        (r"^/api/v1/namespaces/([^/]+)/secrets(?:/([^/]+))?$", "Secret"),
    )
]
CUSTOM_ROUTE = re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+)(?:/status)?)?$")
DISCOVERY_ROUTE = re.compile(r"^/apis(?:/([^/]+)/([^/]+))?/?$")
NOT_FOUND = "the server could not find the requested resource"


class Handler(http.server.BaseHTTPRequestHandler):
    cluster: StandInCluster
    protocol_version = "HTTP/1.1"
    what = ""
    """The request being answered, as counted in ``StandInCluster.requests``."""

    def log_message(self, *args) -> None:
        pass

    def _route(self) -> tuple[str | None, str, str | None, dict]:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        for pattern, kind in ROUTES:
            if m := pattern.match(url.path):
                return kind, m.group(1), m.group(2) if m.lastindex and m.lastindex >= 2 else None, query
        if m := CUSTOM_ROUTE.match(url.path):
            return discovery.served(self.cluster.crds, m[1], m[2], m[4]), m[3], m[5], query
        return None, "", None, query

    def _admitted(self, method: str, name: str | None, query: dict) -> bool:
        """Count the request by verb and resource; False (answered 403) when RBAC denies the verb."""
        parts = urllib.parse.urlsplit(self.path).path.split("/")
        at = parts.index("namespaces") + 2 if "namespaces" in parts else len(parts) - 1
        resource = "/".join(parts[at : at + 1] + parts[at + 2 : at + 3])
        verb = {"POST": "create", "DELETE": "delete"}.get(method) or (
            "get" if name else "watch" if flag(query, "watch") else "list"
        )
        self.what = f"{verb} {resource}"
        self.cluster.requests[self.what] += 1
        if (verb, resource) in self.cluster.forbidden:
            self.status(
                403,
                "Forbidden",
                f'{resource} is forbidden: User "system:serviceaccount:tfdist:airflow" '
                f'cannot {verb} resource "{resource}" in the namespace',
            )
            return False
        return True

    # answers ---------------------------------------------------------------------------------------------

    def send(self, code: int, body: dict | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.cluster.bytes_sent[self.what] += len(data)
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code: int, reason: str, message: str) -> None:
        self.send(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": message,
                "reason": reason,
                "code": code,
            },
        )

    def start_stream(self, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, body: dict | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode() + b"\n"
        self.cluster.bytes_sent[self.what] += len(data)
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else {}

    # GET ---------------------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self.what = ""
        if time.monotonic() < self.cluster.outage_until:
            return self._cut_off()
        if m := DISCOVERY_ROUTE.match(urllib.parse.urlsplit(self.path).path):
            crds = self.cluster.crds
            found = discovery.api_resources(crds, m[1], m[2]) if m[1] else discovery.api_groups(crds)
            return self.send(200, found) if found else self.status(404, "NotFound", NOT_FOUND)
        kind, namespace, name, query = self._route()
        if not self._admitted("GET", name, query):
            return None
        if kind == "Log":
            return self._log(namespace, name, query)
        if kind not in (None, "Event") and not name and flag(query, "watch"):
            return streams.watch(self, kind, namespace, query)
        if kind == "Event":
            return self._events(namespace, query)
        if kind is None:
            return self.status(404, "NotFound", NOT_FOUND)
        return self._read(kind, namespace, name, query)

    def _cut_off(self) -> None:
        """A response cut off mid-body, its connection closed (an API server restarting)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "4096")
        self.end_headers()
        self.wfile.write(b'{"kind": ')
        self.close_connection = True

    def _events(self, namespace: str, query: dict) -> None:
        wanted = query.get("fieldSelector", "").removeprefix("involvedObject.name=")
        with self.cluster.lock:
            items = copy.deepcopy(
                [
                    e
                    for e in self.cluster.events
                    if e["metadata"]["namespace"] == namespace and (not wanted or e["involvedObject"]["name"] == wanted)
                ]
            )
        self.send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})

    def _read(self, kind: str, namespace: str, name: str | None, query: dict) -> None:
        """Get one object, or list those the query's selectors select (with the list's resourceVersion)."""
        c = self.cluster
        with c.lock:  # a copy, as the controllers change objects meanwhile
            obj = copy.deepcopy(c.objects.get((kind, namespace, name))) if name else None
            items = (
                []
                if name
                else copy.deepcopy(
                    [o for (k, ns, _), o in c.objects.items() if k == kind and ns == namespace and selected(o, query)]
                )
            )
            revision = c.revision
        if name:
            return self.send(200, obj) if obj else self.status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
        listed = {"resourceVersion": str(revision)}
        self.send(200, {"kind": f"{kind}List", "apiVersion": API_VERSIONS[kind], "metadata": listed, "items": items})

    def _log(self, namespace: str, name: str, query: dict) -> None:
        pod = self.cluster.pods.get(name)
        if pod is None or pod.namespace != namespace:
            return self.status(404, "NotFound", f'pods "{name}" not found')
        waiting = ((pod.obj["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting")
        if waiting:  # as the kubelet answers for a container that never started
            why = (
                "trying and failing to pull image"
                if waiting["reason"] in ("ErrImagePull", "ImagePullBackOff")
                else waiting["reason"]
            )
            return self.status(
                400, "BadRequest", f'container "{pod.container["name"]}" in pod "{name}" is waiting to start: {why}'
            )
        if flag(query, "follow"):
            return streams.follow_log(self, pod, query)
        lines = open(pod.log_path).read().splitlines() if os.path.exists(pod.log_path) else []
        self.send(200, "".join(log_lines(lines, query, first=True)))

    # POST and DELETE ---------------------------------------------------------------------------------------

    def do_POST(self) -> None:
        kind, namespace, name, query = self._route()
        obj = self._body()
        if not self._admitted("POST", name, query):
            return None
        if kind == "Eviction":
            if not self.cluster.evict(namespace, name):
                return self.status(404, "NotFound", f'pods "{name}" not found')
            return self.send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if kind is None:
            return self.status(404, "NotFound", NOT_FOUND)
        if kind in ("Pod", "Log", "Event") or name:
            return self.status(405, "MethodNotAllowed", f"cannot create at {self.path}")
        name, c = obj["metadata"]["name"], self.cluster
        if c.create(obj, namespace) is None:
            return self.status(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
        with c.lock:
            c.created.append((kind, name))
            created = copy.deepcopy(obj)
        time.sleep(c.create_delay)
        self.send(201, created)

    def do_DELETE(self) -> None:
        kind, namespace, name, query = self._route()
        options = self._body()
        if not self._admitted("DELETE", name, query):
            return None
        propagation = (
            query.get("propagationPolicy")
            or options.get("propagationPolicy")
            or ("Orphan" if options.get("orphanDependents") else None)
        )
        obj = self.cluster.delete(kind, namespace, name, propagation) if kind and name else None
        if obj is None:
            return self.status(404, "NotFound", f'{(kind or "object").lower()}s "{name}" not found')
        if kind == "Pod":  # the API server answers a pod's deletion with the pod
            with self.cluster.lock:
                body = copy.deepcopy(obj)
            return self.send(200, body)
        group = API_VERSIONS[kind].rpartition("/")[0]
        details = {"name": name, "group": group, "kind": f"{kind.lower()}s", "uid": obj["metadata"]["uid"]}
        self.send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": details})
