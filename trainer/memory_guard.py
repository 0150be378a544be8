"""The memory guard of the train stage: before TensorFlow starts, refuse a training whose tables of weights by id
would not fit the memory its processes on this host have."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tfdist.contract.launch import EXIT_REFUSED
from tfdist.trainer.models import table_bytes
from tfdist.trainer.runtime import fail, memory_limit, tf_config

if TYPE_CHECKING:
    from tfdist.contract.data_records import Manifest
    from tfdist.spec import Spec


def refuse_tables_over_memory(spec: Spec, manifest: Manifest) -> None:
    """Refuse (EXIT_REFUSED) to train when the tables of weights by id that this process and the others of its role
    on this host hold (with the optimizer's slots: every worker or rank holds them all; with parameter servers each
    ps its share, at least the largest table) take over half of the memory this process has, naming the features
    and the fix."""
    t = spec.training
    config = tf_config()
    role = "worker"
    if t.strategy == "parameter_server":
        role = config.get("task", {}).get("type")
        if role != "ps":
            return
    tables = table_bytes(spec, manifest)
    if not tables:
        return
    each = sum(tables.values()) // t.num_ps if role == "ps" else sum(tables.values())  # split or round-robin
    sharing = processes_on_this_host(config)
    needed = each * sharing
    available, source = memory_limit()
    if needed > available // 2:
        largest = sorted(tables.items(), key=lambda item: -item[1])
        fix = f"give the {role}s more memory, or " + (
            "add parameter servers (training.num_ps)"
            if role == "ps"
            else "split the tables over parameter servers (training.strategy parameter_server)"
        )
        here = f" ({sharing} such processes on this host: {needed / 2**20:,.0f} MiB)" if sharing > 1 else ""
        fail(
            f"the tables of the categorical features need {each / 2**20:,.0f} MiB in this {role} process with the "
            f"optimizer's slots ({', '.join(f'{name} {size / 2**20:,.0f} MiB' for name, size in largest)}){here}, "
            f"over half of the {available / 2**20:,.0f} MiB it has ({source}). Lower vocabulary.max_tokens, "
            f"hash_buckets or embedding_dim of data.features {', '.join(name for name, _ in largest)} (or the "
            f"crosses' hash_buckets), or {fix}",
            EXIT_REFUSED,
        )


def processes_on_this_host(config: dict[str, Any]) -> int:
    """The processes of this one's role on its host, itself included, which share its memory: Horovod's local ranks,
    or the TF cluster's (``config``: TF_CONFIG) members of its role at its address's host."""
    local_ranks = os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("HOROVOD_LOCAL_SIZE")
    if local_ranks:
        return int(local_ranks)
    task = config.get("task", {})
    members = config.get("cluster", {}).get(task.get("type"), [])
    if not members:
        return 1
    host = members[task["index"]].rsplit(":", 1)[0]
    return sum(member.rsplit(":", 1)[0] == host for member in members)
