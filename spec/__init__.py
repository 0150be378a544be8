"""The pipeline spec: one validated pydantic model, the only way in, for the Airflow side and the workers alike
(no Airflow, no TensorFlow). Errors name the field path and what is allowed, e.g.
'training.num_workers: Input should be greater than or equal to 1 (got 0)'.

``model``: the sections and ``Spec`` · ``overrides``: what a run may override, field values and docs ·
``errors``: ``SpecError`` and field-named problems · ``load``: ``load_spec``."""

from tfdist.spec.errors import SpecError
from tfdist.spec.load import load_spec
from tfdist.spec.model import (
    NAME_PATTERN,
    PARTITION_KEY_FORMATS,
    ROLES,
    ArtifactVolume,
    AssetSchedule,
    ChangeThreshold,
    CheckpointSelection,
    CNNModel,
    CustomModel,
    DataSpec,
    ExportSpec,
    Feature,
    KubernetesSpec,
    Label,
    MLPModel,
    ModelSpec,
    MPISpec,
    PodSettings,
    RetrySpec,
    Spec,
    Threshold,
    TrainingSpec,
    ValidationSpec,
    default_artifact_root,
    partition_unit,
    section_models,
)
from tfdist.spec.overrides import AuthorOnly, field_doc, field_value, override_policy, override_refusal

__all__ = [
    "NAME_PATTERN",
    "PARTITION_KEY_FORMATS",
    "ROLES",
    "ArtifactVolume",
    "AssetSchedule",
    "AuthorOnly",
    "CNNModel",
    "ChangeThreshold",
    "CheckpointSelection",
    "CustomModel",
    "DataSpec",
    "ExportSpec",
    "Feature",
    "KubernetesSpec",
    "Label",
    "MLPModel",
    "MPISpec",
    "ModelSpec",
    "PodSettings",
    "RetrySpec",
    "Spec",
    "SpecError",
    "Threshold",
    "TrainingSpec",
    "ValidationSpec",
    "default_artifact_root",
    "field_doc",
    "field_value",
    "load_spec",
    "override_policy",
    "override_refusal",
    "partition_unit",
    "section_models",
]
