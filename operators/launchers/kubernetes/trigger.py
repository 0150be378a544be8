"""The trigger following a deferred stage from the triggerer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tfdist.operators.launchers.base import ElasticRestart, StageEvent, StageFailed
from tfdist.operators.launchers.kubernetes.api import Watch, delete_objects
from tfdist.operators.launchers.kubernetes.follow import follow

CLASS_PATH = f"{__package__}.StageTrigger"
"""The path a deferred task's trigger is stored by: the package's, stable across moves of this module."""


class StageTrigger(BaseTrigger):
    """Follows a stage's Kubernetes objects from the triggerer (``follow``): one event with the result
    record or the failure (with what was lost, for an elastic restart). ``restarts``: the elastic restarts
    before these objects. A user killing the deferred task deletes the objects (``on_kill``); a triggerer
    restart does not (the next triggerer follows on)."""

    def __init__(self, watch: dict[str, Any], restarts: Sequence[ElasticRestart | dict[str, Any]] = ()) -> None:
        super().__init__()
        self.watch = watch
        self.restarts = [ElasticRestart.model_validate(r) for r in restarts]  # as serialized: their XCom shape

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASS_PATH, {"watch": self.watch, "restarts": [r.xcom() for r in self.restarts]}

    async def run(self):
        try:
            result = await follow(Watch.from_dict(self.watch), self.log)
        except StageFailed as exc:
            yield TriggerEvent(StageEvent.failed(exc, self.restarts).payload())
            return
        yield TriggerEvent(StageEvent.succeeded(result, self.restarts).payload())

    async def on_kill(self) -> None:
        await delete_objects(Watch.from_dict(self.watch), self.log)
