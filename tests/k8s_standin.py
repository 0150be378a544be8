"""A stand-in Kubernetes cluster for the tests: the Kubernetes REST API (JSON over HTTP, as the real
``kubernetes`` client speaks it) for Jobs, Services, pods, pod logs, evictions and events, a Job controller
for Indexed Jobs, and a kubelet that runs each pod's container command as real processes. Needs root.

Each pod gets what a pod has: its own network namespace with an address on a bridge (so every TF server can
listen on port 2222, as in a cluster), interface ``eth0``, its own host name, and an ``/etc/hosts`` naming
every pod of its headless Service (``<hostname>.<subdomain>``, not-ready pods included, as
``publishNotReadyAddresses`` does). The artifact volume is this machine's file system, at the same path.

What it does not model: images (``python`` is this interpreter and the repository is on PYTHONPATH), the
scheduler beyond node selectors, and resources (every other pod is scheduled at once on one node), admission
and schema checks (tests validate objects offline), watches, authentication, real DNS, owner references and
TTLs, and kubelet restarts."""

from __future__ import annotations

import datetime as dt
import http.server
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRACE_SECONDS = 5.0
NODE_LABELS = {"kubernetes.io/hostname": "standin", "kubernetes.io/os": "linux"}
"""The one node's labels: a pod whose nodeSelector asks for others stays Pending (FailedScheduling)."""
_clusters = itertools.count()


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _matches(obj: dict, selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",") if term))


class Pod:
    """One pod: its object, and the processes and network namespace the kubelet gives it."""

    def __init__(self, cluster: Cluster, obj: dict, address: str):
        self.cluster, self.obj, self.address = cluster, obj, address
        name = obj["metadata"]["name"]
        self.dir = os.path.join(cluster.workdir, "pods", name)
        os.makedirs(self.dir)
        self.log_path, self.hosts_path = os.path.join(self.dir, "log"), os.path.join(self.dir, "hosts")
        self.netns = f"tfd{cluster.id}p{address.rsplit('.', 1)[1]}"
        self.proc: subprocess.Popen | None = None
        self.disruption: str | None = None
        """Why the pod is being disrupted (an eviction): it ends with a DisruptionTarget condition."""

    @property
    def hostname(self) -> str:
        return self.obj["spec"]["hostname"]

    @property
    def subdomain(self) -> str | None:
        return self.obj["spec"].get("subdomain")

    def start(self) -> None:
        veth = f"tfd{self.cluster.id}v{self.address.rsplit('.', 1)[1]}"
        run = self.cluster.run
        run("ip", "netns", "add", self.netns)
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        run("ip", "link", "set", veth, "master", self.cluster.bridge, "up")
        for argv in (("ip", "addr", "add", f"{self.address}/24", "dev", "eth0"), ("ip", "link", "set", "eth0", "up"),
                     ("ip", "link", "set", "lo", "up")):
            run("ip", "netns", "exec", self.netns, *argv)
        self.obj["status"].update(phase="Running", podIP=self.address, startTime=now(),
                                  conditions=[{"type": "Ready", "status": "True"}])
        self.cluster.write_hosts(self.subdomain)
        container = self.obj["spec"]["containers"][0]
        command = [sys.executable if a == "python" else a for a in container["command"]]
        env = {**{e["name"]: e["value"] for e in container.get("env", [])}, "PATH": os.environ["PATH"],
               "PYTHONPATH": REPO, "JOB_COMPLETION_INDEX": self.obj["metadata"]["annotations"][
                   "batch.kubernetes.io/job-completion-index"]}
        enter = ["ip", "netns", "exec", self.netns, "unshare", "-mu", "sh", "-c",
                 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"', self.hosts_path, self.hostname]
        self.proc = subprocess.Popen([*enter, *command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.cluster.event(self.obj, "Started", f"Started container {container['name']}")
        threading.Thread(target=self._log_and_wait, daemon=True).start()

    def _log_and_wait(self) -> None:
        with open(self.log_path, "a") as log:
            for raw in self.proc.stdout:
                log.write(f"{now()} {raw.decode(errors='replace').rstrip()}\n")
                log.flush()
        code = self.proc.wait()
        code = code if code >= 0 else 128 - code
        tail = open(self.log_path).read().splitlines()[-80:]
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": now(),
                      "message": "\n".join(line.split(" ", 1)[1] for line in tail)[-2048:] if code else ""}
        with self.cluster.lock:
            self.obj["status"].update(phase="Succeeded" if code == 0 else "Failed",
                                      conditions=[{"type": "Ready", "status": "False"}])
            if self.disruption:
                self.obj["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                                         "reason": self.disruption,
                                                         "message": "Eviction API: evicting"})
            container = self.obj["spec"]["containers"][0]
            self.obj["status"]["containerStatuses"] = [{
                "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                "restartCount": 0, "state": {"terminated": terminated}}]
        self.cluster.run("ip", "netns", "delete", self.netns, check=False)
        self.cluster.changed.set()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period, as the kubelet does."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Cluster:
    """The stand-in: ``start()`` serves the API on 127.0.0.1; ``kubeconfig`` points a client at it."""

    def __init__(self, workdir: str):
        self.id = f"{os.getpid() % 1000}{next(_clusters)}"
        self.workdir, self.bridge = workdir, f"tfd{self.id}br"
        self.subnet = f"10.{200 + os.getpid() % 50}.{self.id[-1]}"
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.pods: dict[str, Pod] = {}
        self.events: list[dict] = []
        self.created: list[tuple[str, str]] = []
        """(kind, name) of every object created through the API, in order."""
        self.lock, self.changed = threading.RLock(), threading.Event()
        self.addresses = (f"{self.subnet}.{n}" for n in itertools.count(2))
        self._stopping = False

    def run(self, *argv: str, check: bool = True) -> None:
        subprocess.run(argv, check=check, capture_output=True)

    def start(self) -> Cluster:
        self.run("ip", "link", "add", self.bridge, "type", "bridge")
        self.run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        self.run("ip", "link", "set", self.bridge, "up")
        handler = type("Handler", (_Handler,), {"cluster": self})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self._control, daemon=True).start()
        return self

    @property
    def kubeconfig(self) -> dict:
        server = f"http://127.0.0.1:{self.server.server_address[1]}"
        return {"apiVersion": "v1", "kind": "Config", "current-context": "standin",
                "clusters": [{"name": "standin", "cluster": {"server": server}}],
                "users": [{"name": "standin", "user": {"token": "standin"}}],
                "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "standin"}}]}

    def close(self) -> None:
        self._stopping = True
        self.server.shutdown()
        for pod in list(self.pods.values()):
            pod.stop()
        time.sleep(0.2)
        for pod in self.pods.values():
            self.run("ip", "netns", "delete", pod.netns, check=False)
        self.run("ip", "link", "delete", self.bridge, check=False)

    def event(self, obj: dict, reason: str, message: str, type_: str = "Normal") -> None:
        meta = obj["metadata"]
        where = {"name": meta["name"], "namespace": meta["namespace"]}
        self.events.append({"metadata": {**where, "name": f"{meta['name']}.{uuid.uuid4().hex[:8]}"},
                            "involvedObject": {"kind": obj["kind"], **where},
                            "reason": reason, "message": message, "type": type_, "lastTimestamp": now()})

    def write_hosts(self, subdomain: str | None) -> None:
        """Rewrite in place (the pods bind-mount these files) the hosts file of every pod of ``subdomain``."""
        with self.lock:
            peers = [p for p in self.pods.values() if p.subdomain == subdomain and p.obj["status"].get("podIP")]
            for pod in (p for p in self.pods.values() if p.subdomain == subdomain):
                lines = ["127.0.0.1 localhost"] + [
                    f"{p.address} {p.hostname}.{subdomain} {p.hostname}" if subdomain else f"{p.address} {p.hostname}"
                    for p in peers if subdomain or p is pod]
                with open(pod.hosts_path, "w") as f:
                    f.write("\n".join(lines) + "\n")

    # the Job controller -------------------------------------------------------------------------------

    def create_pods(self, job: dict) -> None:
        meta, spec = job["metadata"], job["spec"]
        template = spec["template"]
        for index in range(spec["completions"]):
            name = f"{meta['name']}-{index}-{uuid.uuid4().hex[:5]}"
            labels = {**template["metadata"].get("labels", {}), "batch.kubernetes.io/job-name": meta["name"],
                      "job-name": meta["name"], "batch.kubernetes.io/job-completion-index": str(index)}
            annotations = {**template["metadata"].get("annotations", {}),
                           "batch.kubernetes.io/job-completion-index": str(index)}
            obj = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                                "annotations": annotations, "uid": str(uuid.uuid4()), "creationTimestamp": now()},
                   "spec": {**json.loads(json.dumps(template["spec"])), "hostname": f"{meta['name']}-{index}"},
                   "status": {"phase": "Pending"}}
            with self.lock:
                self.objects["Pod", meta["namespace"], name] = obj
                self.pods[name] = Pod(self, obj, next(self.addresses))
        for name in [n for n, p in self.pods.items() if p.obj["metadata"]["labels"]["job-name"] == meta["name"]]:
            pod = self.pods[name]
            selector = pod.obj["spec"].get("nodeSelector", {})
            if selector.items() <= NODE_LABELS.items():
                pod.start()
            else:  # as the scheduler reports a pod that no node can take
                self.event(pod.obj, "FailedScheduling", "0/1 nodes are available: 1 node(s) didn't match Pod's node "
                           "affinity/selector. preemption: 0/1 nodes are available.", "Warning")
        job["status"].update(active=spec["completions"], startTime=now())

    def _control(self) -> None:
        while not self._stopping:
            self.changed.wait(0.5)
            self.changed.clear()
            with self.lock:
                jobs = [o for (kind, _, _), o in self.objects.items() if kind == "Job"]
            for job in jobs:
                self._reconcile(job)

    def _reconcile(self, job: dict) -> None:
        status = job["status"]
        if any(c["type"] in ("Complete", "Failed") for c in status.get("conditions", [])):
            return
        pods = [p for p in self.pods.values() if p.obj["metadata"]["labels"]["job-name"] == job["metadata"]["name"]]
        done = {int(p.obj["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]): p
                for p in pods if p.obj["status"]["phase"] in ("Succeeded", "Failed")}
        succeeded = sorted(i for i, p in done.items() if p.obj["status"]["phase"] == "Succeeded")
        failed = [p for p in done.values() if p.obj["status"]["phase"] == "Failed"]
        status.update(succeeded=len(succeeded), failed=len(failed), active=len(pods) - len(done),
                      completedIndexes=",".join(map(str, succeeded)))
        conditions = []
        if failed:
            pod = failed[0]
            reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
            for k, rule in enumerate(job["spec"].get("podFailurePolicy", {}).get("rules", [])):
                hit = self._rule_matches(rule, pod)
                if hit:
                    reason, message = "PodFailurePolicy", f"{hit} for pod {pod.obj['metadata']['namespace']}/" \
                                                          f"{pod.obj['metadata']['name']} matching FailJob rule at index {k}"
                    break
            conditions = [{"type": "FailureTarget", "status": "True", "reason": reason, "message": message},
                          {"type": "Failed", "status": "True", "reason": reason, "message": message}]
        else:
            wanted = [r["succeededIndexes"] for r in job["spec"].get("successPolicy", {}).get("rules", [])]
            if any(set(map(int, w.split(","))) <= set(succeeded) for w in wanted):
                conditions = [{"type": "SuccessCriteriaMet", "status": "True", "reason": "SuccessPolicy"},
                              {"type": "Complete", "status": "True", "reason": "SuccessPolicy"}]
            elif len(succeeded) == job["spec"]["completions"]:
                conditions = [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]
        if conditions:
            for p in pods:
                p.stop()  # lingering pods are terminated once the Job is finished
            for c in conditions:
                c["lastTransitionTime"] = now()
            status.update(conditions=conditions, completionTime=now() if conditions[-1]["type"] == "Complete" else None)
            self.event(job, conditions[-1]["reason"], conditions[-1].get("message", ""),
                       "Warning" if conditions[-1]["type"] == "Failed" else "Normal")

    @staticmethod
    def _rule_matches(rule: dict, pod: Pod) -> str | None:
        if "onPodConditions" in rule:
            types = {c["type"] for c in pod.obj["status"].get("conditions", []) if c["status"] == "True"}
            if types & {c["type"] for c in rule["onPodConditions"]}:
                return "Pod has condition DisruptionTarget"
            return None
        terminated = pod.obj["status"]["containerStatuses"][0]["state"]["terminated"]
        codes, op = rule["onExitCodes"]["values"], rule["onExitCodes"]["operator"]
        if (terminated["exitCode"] in codes) == (op == "In"):
            return f"Container {pod.obj['spec']['containers'][0]['name']} failed with exit code {terminated['exitCode']}"
        return None

    def delete(self, kind: str, namespace: str, name: str) -> dict | None:
        with self.lock:
            obj = self.objects.pop((kind, namespace, name), None)
        if obj and kind == "Job":
            for pod_name in [n for n, p in self.pods.items() if p.obj["metadata"]["labels"]["job-name"] == name]:
                self.delete("Pod", namespace, pod_name)
        elif obj and kind == "Pod":
            self.pods.pop(name).stop()
        return obj

    def evict(self, namespace: str, name: str) -> bool:
        """The Eviction API: the pod is stopped and ends with a DisruptionTarget condition (kept, as the Job
        controller must see it)."""
        pod = self.pods.get(name)
        if pod is None or pod.obj["metadata"]["namespace"] != namespace:
            return False
        pod.disruption = "EvictionByEvictionAPI"
        threading.Thread(target=pod.stop, daemon=True).start()
        return True


ROUTES = [(re.compile(p), kind) for p, kind in (
    (r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?(?:/status)?$", "Job"),
    (r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$", "Service"),
    (r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$", "Pod"),
    (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(log)$", "Log"),
    (r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(eviction)$", "Eviction"),
    (r"^/api/v1/namespaces/([^/]+)/events$", "Event"),
)]


class _Handler(http.server.BaseHTTPRequestHandler):
    cluster: Cluster
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _route(self) -> tuple[str | None, str, str | None, dict]:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        for pattern, kind in ROUTES:
            if m := pattern.match(url.path):
                return kind, m.group(1), m.group(2) if m.lastindex and m.lastindex >= 2 else None, query
        return None, "", None, query

    def _send(self, code: int, body: dict | str) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                          "reason": reason, "code": code})

    def do_GET(self) -> None:
        kind, namespace, name, query = self._route()
        c = self.cluster
        if kind == "Log":
            return self._log(namespace, name, query)
        if kind == "Event":
            wanted = query.get("fieldSelector", "").removeprefix("involvedObject.name=")
            items = [e for e in c.events if e["metadata"]["namespace"] == namespace
                     and (not wanted or e["involvedObject"]["name"] == wanted)]
            return self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})
        if kind is None:
            return self._status(404, "NotFound", f"no route {self.path}")
        with c.lock:
            if name:
                obj = c.objects.get((kind, namespace, name))
                return self._send(200, obj) if obj else self._status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
            items = [o for (k, ns, _), o in c.objects.items() if k == kind and ns == namespace
                     and _matches(o, query.get("labelSelector", ""))]
            self._send(200, {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {}, "items": items})

    def _log(self, namespace: str, name: str, query: dict) -> None:
        pod = self.cluster.pods.get(name)
        if pod is None or pod.obj["metadata"]["namespace"] != namespace:
            return self._status(404, "NotFound", f'pods "{name}" not found')
        lines = open(pod.log_path).read().splitlines() if os.path.exists(pod.log_path) else []
        if "sinceSeconds" in query:
            since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=int(query["sinceSeconds"]))
            lines = [l for l in lines if dt.datetime.strptime(l.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ")
                     .replace(tzinfo=dt.timezone.utc) >= since]
        if query.get("timestamps", "false").lower() != "true":
            lines = [line.split(" ", 1)[1] if " " in line else "" for line in lines]
        self._send(200, "".join(line + "\n" for line in lines))

    def do_POST(self) -> None:
        kind, namespace, name, _ = self._route()
        obj = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if kind == "Eviction":
            if not self.cluster.evict(namespace, name):
                return self._status(404, "NotFound", f'pods "{name}" not found')
            return self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if kind not in ("Job", "Service"):
            return self._status(405, "MethodNotAllowed", f"cannot create at {self.path}")
        name = obj["metadata"]["name"]
        c = self.cluster
        with c.lock:
            if (kind, namespace, name) in c.objects:
                return self._status(409, "AlreadyExists", f'{kind.lower()}s "{name}" already exists')
            obj["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now())
            obj["status"] = {}
            c.objects[kind, namespace, name] = obj
            c.created.append((kind, name))
        self._send(201, obj)
        if kind == "Job":
            c.create_pods(obj)

    def do_DELETE(self) -> None:
        kind, namespace, name, _ = self._route()
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        obj = self.cluster.delete(kind, namespace, name) if kind and name else None
        if obj is None:
            return self._status(404, "NotFound", f'{(kind or "object").lower()}s "{name}" not found')
        self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}})
        self.cluster.changed.set()
