"""API discovery: the groups, versions and resources the stand-in serves (batch/v1 Jobs, and the Kubeflow
custom resources its ``crds`` install)."""

from __future__ import annotations

from collections.abc import Sequence

from tests.k8s_standin.common import CRDS, VERBS


def served(crds: Sequence[str], group: str, version: str, plural: str) -> str | None:
    """The kind of an installed custom resource, or None."""
    return CRDS[plural][2] if plural in crds and CRDS[plural][:2] == (group, version) else None


def api_groups(crds: Sequence[str]) -> dict:
    """The APIGroupList: batch, and kubeflow.org with the versions of its installed CRDs (GA first)."""
    kubeflow = [v for v in ("v1", "v2beta1") if any(CRDS[p][1] == v for p in crds)]
    groups = [("batch", ["v1"])] + ([("kubeflow.org", kubeflow)] if kubeflow else [])
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": g,
                "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{g}/{versions[0]}", "version": versions[0]},
            }
            for g, versions in groups
        ],
    }


def api_resources(crds: Sequence[str], group: str, version: str) -> dict | None:
    """The APIResourceList of a group version (None when none is served): each resource and its status."""
    kinds = (
        [("jobs", "Job")]
        if (group, version) == ("batch", "v1")
        else [(p, CRDS[p][2]) for p in crds if CRDS[p][:2] == (group, version)]
    )
    if not kinds:
        return None
    resources = []
    for plural, kind in kinds:
        resources += [
            {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind, "verbs": VERBS},
            {
                "name": f"{plural}/status",
                "singularName": "",
                "namespaced": True,
                "kind": kind,
                "verbs": ["get", "patch", "update"],
            },
        ]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": resources,
    }
