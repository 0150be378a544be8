"""A stand-in Kubernetes cluster for the tests: the Kubernetes REST API (JSON over HTTP, as the real
``kubernetes`` client speaks it) for Jobs, Services, ConfigMaps, Secrets, pods, pod logs, evictions, events,
API discovery and the Kubeflow custom resources its ``crds`` install; a Job controller (Indexed and NonIndexed
Jobs); a TFJob controller (as Kubeflow's training operator v1 reconciles TFJobs); an MPIJob controller (as
Kubeflow's MPI operator v2beta1, v0.6, reconciles MPIJobs); a garbage collector following owner references;
and a kubelet that runs each pod's container command as real processes. ``drop_connections`` makes the API
cut off its responses for a while (an API server restart, dropped log streams). Lists carry a resourceVersion,
and watches (``watch=true``, from a ``resourceVersion``, with bookmarks, by label or ``metadata.name`` field
selector) stream every change after it, or a 410 Expired ERROR event once the history (``history_limit``
changes) no longer reaches back to it; a log read with ``follow=true`` streams each new line and ends when the
container has ended. The process kubelet needs root; with
``ScriptedKubelet`` (``scripted``) the rest runs rootless, each pod's container a script the test gives.

Each pod gets what a pod has: its own network namespace with an address on a bridge (so every TF server can
listen on port 2222, as in a cluster), interface ``eth0``, its own host name, a ``/dev`` of its own (a tmpfs
with the usual devices, as a container runtime makes it) where the pod's termination message file is
bind-mounted at the container's ``terminationMessagePath``, a memory cgroup with the container's memory limit
(the kernel OOM-kills past it; without a cgroup v1 memory controller the kubelet polls the processes' memory
and kills them instead), and an ``/etc/hosts`` standing in for cluster DNS: the A records of every headless
Service (``<service>.<namespace>.svc``, and ``<hostname>.<service>`` for pods whose subdomain is the Service)
naming its ready pods (not-ready ones too with ``publishNotReadyAddresses``; never terminated ones). The
kubelet pulls images from the cluster's registry (``images``: one it lacks leaves the pod Pending in
``ErrImagePull``, then ``ImagePullBackOff``), mounts Secret and ConfigMap volumes read-only (their files
written with the volume's modes, as the kubelet writes them; a pod whose object is missing waits) and an
emptyDir as a directory of the pod's, sets the variables of a container's ``envFrom`` Secrets, runs the
container as root or, with ``securityContext.runAsUser``, as that user (in a user namespace mapping the user
to this machine's root: it has no capabilities, and this machine's root-owned files look like its own, so the
artifact volume is writable as a volume given with a matching fsGroup would be), and reports the termination
message (``File`` or ``FallbackToLogsOnError``) and ``OOMKilled`` as the real one does. The artifact volume is
this machine's file system, at the same path. Deleting an object deletes its dependents unless the
propagation policy is Orphan (for a batch/v1 Job deleted through the API, the API server's default).

The image's files where they matter: each pod sees the worker image's (docker/Dockerfile.worker) user,
``tfdist`` (uid 1000, home /home/tfdist), in /etc/passwd and /etc/group (this machine's files otherwise), a
/home holding only that user's home with its sshd config (docker/sshd_config), and /etc/ssh/ssh_config.d
holding only the image's ssh client settings (docker/ssh_config): per-pod copies bind-mounted in the pod's
own mount namespace; every other file is this machine's. So an MPIJob runs as on a cluster: the operator's
Service, ConfigMap (``hostfile``, ``discover_hosts.sh``), Secret (a generated key pair as ``id_rsa``,
``id_rsa.pub``, ``authorized_keys`` at ``sshAuthMountPath``), worker pods ``<job>-worker-<i>`` running their
command (this machine's ``/usr/sbin/sshd``) and the launcher Job ``<job>-launcher`` whose pod gets OpenMPI's
environment and the hostfile at /etc/mpi; this machine's ``mpirun`` there reaches the workers' sshd with
this machine's ``ssh`` and starts ``orted`` and the ranks through it; the MPIJob's conditions (Created,
Running, Succeeded, Failed) and replicaStatuses follow the launcher Job and the workers, cleanPodPolicy
deletes the workers once it ended, runPolicy.backoffLimit is the launcher Job's (a failed launcher pod is
replaced until it is exceeded).

What it does not model: other image contents (``python`` is this interpreter, with tfdist installed as in
the worker image) and an image's USER (a container without runAsUser runs as root), volumes other than Secrets,
ConfigMaps, emptyDirs and the artifact volume, updates of a mounted Secret or ConfigMap (its files are written
when the container starts: ``discover_hosts.sh`` in a running launcher stays as it was), envFrom ConfigMaps, the
scheduler beyond node selectors, and resources beyond memory limits (every other pod is scheduled at once on
one node), container restarts (a container runs once whatever its restartPolicy; the training operator
recreates a failed OnFailure or Always replica instead, with no back-off and no backoffLimit; the Job
controller replaces failed pods up to backoffLimit, with no back-off), PID and IPC namespaces (a container's
other processes are killed when its main process ends, as the runtime does), label selectors beyond
``key=value``, admission, defaulting and schema checks (tests validate objects offline; controllers apply
their defaults in memory), updates and patches, authentication, real DNS (so no ``dnsConfig``),
TTLs, deadlines, suspension, the training operator's webhooks, the MPI operator's Intel MPI and MPICH modes,
``runLauncherAsWorker``, scaling of workers and its elastic Horovod, gang scheduling and dynamic workers, and
kubelet restarts. How a real API server differs in what it serves: it records each write as one change,
where the stand-in compares its objects every ``timing.RECORD_SECONDS`` (two changes within that time are one
event); its watches are served from a watch cache, its lists may be too; an object whose labels change out of
a watch's selector is a DELETED event there, unmodelled here; it sends bookmarks about once a minute (here
every ``timing.BOOKMARK_SECONDS``); ``pods/log`` is proxied through the node's kubelet (here read from the
pod's log file); long-running requests (watches, followed logs) are outside its max-inflight limits and capped by its
``--min-request-timeout``. Deleting is synchronous (the call returns once the object, its dependents and their
processes are gone; no other finalizers, no Terminating state) except for a Job's pod deleted or evicted by
itself: it carries the Job controller's job-tracking finalizer, so it is marked (deletionTimestamp), stopped
by the kubelet (SIGTERM, then SIGKILL after the grace period), given a terminal phase, counted by the Job
controller, and only then gone from the API, before the Job's conditions say what its failure did.

The modules: ``cluster`` (``StandInCluster``: starts and closes the whole), ``store`` (objects, resourceVersions,
the history watches resume from, events), ``apiserver`` (create, delete with garbage collection, eviction,
injected faults), ``routes`` (the REST API over HTTP), ``streams`` (watches and followed logs), ``discovery``,
``jobs`` (the Job controller), ``tfjob`` and ``mpijob`` with ``mpijob_objects`` (the Kubeflow controllers),
``pods`` (a pod's object, files and the status its kubelet reports), ``images`` (image pulls), ``kubelet``,
``container``, ``volumes`` and ``dns`` (the process kubelet), ``scripted`` (the rootless kubelet), ``timing``
(every clock, patchable), ``common``."""

from tests.k8s_standin.cluster import StandInCluster
from tests.k8s_standin.common import memory_bytes
from tests.k8s_standin.images import image_reference
from tests.k8s_standin.kubelet import ProcessKubelet
from tests.k8s_standin.scripted import Script, ScriptedKubelet

__all__ = ["ProcessKubelet", "Script", "ScriptedKubelet", "StandInCluster", "image_reference", "memory_bytes"]
