"""A pod's Secret, ConfigMap and emptyDir volumes, its variables from Secrets (``envFrom``), and the worker
image's files where they differ from this machine's: written per pod, to be bind-mounted into its container (by
the process kubelet)."""

from __future__ import annotations

import base64
import copy
import os
import shutil
from typing import TYPE_CHECKING

from tests.k8s_standin import timing
from tests.k8s_standin.common import IMAGE_USER
from tests.support.roots import REPO

if TYPE_CHECKING:
    from tests.k8s_standin.pods import Pod

IMAGE_DIRS = {
    "/home": {"tfdist/.sshd_config": "docker/sshd_config"},
    "/etc/ssh/ssh_config.d": {"tfdist.conf": "docker/ssh_config"},
}
"""The worker image's directories that differ from this machine's, with the files the Dockerfile copies into
them from the repository: the user's home (with its sshd config) and the ssh client's settings."""

Mount = tuple[str, str, str]
"""(source, target, "rw" or "ro") of a bind mount."""


def mount(pod: Pod, write: bool = True) -> list[Mount] | None:
    """The container's Secret and ConfigMap volumes, once every object they name exists (until then the pod
    waits, with FailedMount events); None when the pod was stopped meanwhile. ``write``: False to only wait for
    the objects (a kubelet that runs no container)."""
    while not pod.stopping.is_set():
        try:
            return volumes(pod, write)
        except LookupError as missing:
            pod.cluster.event(pod.obj, "FailedMount", str(missing), "Warning")
            pod.stopping.wait(timing.POD_RESYNC_SECONDS)
    return None


def volumes(pod: Pod, write: bool = True) -> list[Mount]:
    """(source, mountPath, "ro") of each Secret and ConfigMap volume the container mounts, written for the
    pod as the kubelet writes them: each item's key at its path (every key without items), with the
    item's mode, else the volume's defaultMode, else 0644; owned by root, which a container running as
    another user sees as nobody (its user namespace maps this machine's root to that user, so root's own
    files look like the user's). Written once: later changes of the objects do not reach a running pod.
    An emptyDir is a directory of the pod's, writable by any user. The other volumes (the artifact volume) are
    this machine's file system at the same path."""
    declared, mounts = {v["name"]: v for v in pod.obj["spec"].get("volumes", [])}, []
    secret_env(pod)
    for volume_mount in pod.container.get("volumeMounts", []):
        volume = declared[volume_mount["name"]]
        directory = os.path.join(pod.dir, "volumes", volume_mount["name"])
        if "emptyDir" in volume:  # the pod's own, writable by any user, gone with the pod's directory
            os.makedirs(directory, exist_ok=True)
            os.chmod(directory, 0o777)
            mounts.append((directory, volume_mount["mountPath"], "rw"))
            continue
        source = volume.get("secret") or volume.get("configMap")
        if source is None:
            continue
        kind, name = ("Secret", source["secretName"]) if "secret" in volume else ("ConfigMap", source["name"])
        data = _data(pod, kind, name)
        if data is None:
            raise LookupError(
                f'MountVolume.SetUp failed for volume "{volume_mount["name"]}" : {kind.lower()} "{name}" not found'
            )
        if write:
            _write(
                pod,
                directory,
                source,
                {k: base64.b64decode(v) if kind == "Secret" else v.encode() for k, v in data.items()},
            )
        mounts.append((directory, volume_mount["mountPath"], "ro"))
    return mounts


def _data(pod: Pod, kind: str, name: str) -> dict | None:
    with pod.cluster.lock:
        return copy.deepcopy((pod.cluster.objects.get((kind, pod.namespace, name)) or {}).get("data"))


def secret_env(pod: Pod) -> dict[str, str]:
    """The variables of the container's ``envFrom`` Secrets (LookupError while one is missing: the pod waits)."""
    env = {}
    for source in pod.container.get("envFrom", []):
        name = source["secretRef"]["name"]
        if (data := _data(pod, "Secret", name)) is None:
            raise LookupError(f'Error: secret "{name}" not found')
        env.update({k: base64.b64decode(v).decode() for k, v in data.items()})
    return env


def _write(pod: Pod, directory: str, source: dict, data: dict[str, bytes]) -> None:
    owner = 0 if pod.user[0] == 0 else 65534
    for item in source.get("items") or [{"key": key, "path": key} for key in data]:
        path = os.path.join(directory, item["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data[item["key"]])
        os.chmod(path, item.get("mode", source.get("defaultMode", 0o644)))
        os.chown(path, owner, owner)


def image_files(pod: Pod) -> list[Mount]:
    """Bind mounts of the worker image's files where they differ from this machine's, written for the pod:
    /etc/passwd and /etc/group (this machine's, the image's user in place of any with its name or ids)
    and IMAGE_DIRS."""
    name, uid, gid, home = IMAGE_USER
    image, mounts = os.path.join(pod.dir, "image"), []
    os.makedirs(image, exist_ok=True)
    for path, entry in (
        ("/etc/passwd", [name, "x", uid, gid, "", home, "/bin/sh"]),
        ("/etc/group", [name, "x", gid, ""]),
    ):
        with open(path) as f:
            kept = [
                line
                for line in f.read().splitlines()
                if line.split(":")[0] != name and line.split(":")[2:3] != [str(entry[2])]
            ]
        copied = os.path.join(image, os.path.basename(path))
        with open(copied, "w") as f:
            f.write("\n".join([*kept, ":".join(map(str, entry))]) + "\n")
        mounts.append((copied, path, "rw"))
    for directory, files in IMAGE_DIRS.items():
        root = os.path.join(image, directory.strip("/").replace("/", "_"))
        for relative, source in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, relative)), exist_ok=True)
            shutil.copyfile(os.path.join(REPO, source), os.path.join(root, relative))
        mounts.append((root, directory, "rw"))
    return mounts
