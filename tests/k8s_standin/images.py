"""The kubelet's image manager, the same for both kubelets: an image pulls when the cluster's registry
(``StandInCluster.images``) has it; else the container waits (ErrImagePull, then ImagePullBackOff with a
doubling back-off; ErrImageNeverPull with imagePullPolicy Never)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.k8s_standin import timing

if TYPE_CHECKING:
    from tests.k8s_standin.pods import Pod


def image_reference(image: str) -> str:
    """The image's fully qualified reference, as the container runtime names it (``python`` is
    ``docker.io/library/python:latest``)."""
    name, _, digest = image.partition("@")
    first, _, rest = name.partition("/")
    if not rest:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if not digest and ":" not in name.rsplit("/", 1)[1]:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def pull(pod: Pod) -> bool:
    """The kubelet's image pull: the image is there when the cluster's registry has it; else the container
    waits (ErrImagePull, then ImagePullBackOff until the next try, the back-off doubling from 10 s to
    300 s; ErrImageNeverPull with imagePullPolicy Never). False when the pod was stopped meanwhile."""
    cluster, image = pod.cluster, pod.container["image"]
    policy, wait = pod.container["imagePullPolicy"], timing.IMAGE_BACKOFF_SECONDS[0]
    while not pod.stopping.is_set():
        if cluster.has_image(image):
            _pulled(pod, image, policy)
            return True
        if policy == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            pod.waiting("ErrImageNeverPull", message, ("ErrImageNeverPull", message))
            pod.stopping.wait(timing.POD_RESYNC_SECONDS)
            continue
        ref = image_reference(image)
        error = (
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
            f'reference "{ref}": {ref}: not found'
        )
        cluster.event(pod.obj, "Pulling", f'Pulling image "{image}"')
        pod.waiting("ErrImagePull", error, ("Failed", f'Failed to pull image "{image}": {error}'))
        if pod.stopping.wait(timing.POD_RESYNC_SECONDS):
            break
        cluster.event(pod.obj, "BackOff", f'Back-off pulling image "{image}"')
        pod.waiting("ImagePullBackOff", f'Back-off pulling image "{image}"')
        pod.stopping.wait(wait - timing.POD_RESYNC_SECONDS)
        wait = min(2 * wait, timing.IMAGE_BACKOFF_SECONDS[1])
    return False


def _pulled(pod: Pod, image: str, policy: str) -> None:
    if policy == "Always":
        pod.cluster.event(pod.obj, "Pulling", f'Pulling image "{image}"')
        pod.cluster.event(
            pod.obj, "Pulled", f'Successfully pulled image "{image}" in 0s (0s including waiting). Image size: 0 bytes.'
        )
    else:
        pod.cluster.event(pod.obj, "Pulled", f'Container image "{image}" already present on machine')
