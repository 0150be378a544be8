"""The pipeline spec: one validated pydantic model, the only way in, for the Airflow side and the workers alike
(no Airflow, no TensorFlow). Errors name the field path and what is allowed, e.g.
'training.num_workers: Input should be greater than or equal to 1 (got 0)'.

``model``: the root ``Spec`` · a module per section (``data``, ``data_checks``, ``families``, ``training``,
``validation``, ``export``, ``retries``, ``kubernetes``, ``schedule``) on ``section``'s base · ``rules``: a rule
between fields, the model's check and its JSON Schema · ``consistency``: the rules between sections · ``sizing``:
the memory model of the tables · ``locations``: artifact roots · ``overrides``: what a run may override, field
values and docs · ``errors``: ``SpecError`` and field-named problems · ``load``: ``load_spec``."""

from tfdist.spec.data import (
    Categorical,
    CategoricalFeature,
    CategoricalListFeature,
    DataSpec,
    Feature,
    Label,
    NumericFeature,
    Vocabulary,
    label_value,
)
from tfdist.spec.errors import SpecError
from tfdist.spec.export import ExportSpec
from tfdist.spec.families import CNNModel, CustomModel, MLPModel, ModelSpec, WideDeepModel
from tfdist.spec.kubernetes import ROLES, ArtifactVolume, KubernetesSpec, PodSettings
from tfdist.spec.load import load_spec
from tfdist.spec.locations import default_artifact_root
from tfdist.spec.model import Spec
from tfdist.spec.overrides import AuthorOnly, field_doc, field_value, override_policy, override_refusal
from tfdist.spec.retries import RetrySpec
from tfdist.spec.schedule import PARTITION_KEY_FORMATS, AssetSchedule, partition_unit
from tfdist.spec.section import NAME_PATTERN, section_models
from tfdist.spec.training import MPISpec, ParameterServerSpec, TrainingSpec
from tfdist.spec.validation import ChangeThreshold, CheckpointSelection, Threshold, ValidationSpec

__all__ = [
    "NAME_PATTERN",
    "PARTITION_KEY_FORMATS",
    "ROLES",
    "ArtifactVolume",
    "AssetSchedule",
    "AuthorOnly",
    "CNNModel",
    "Categorical",
    "CategoricalFeature",
    "CategoricalListFeature",
    "ChangeThreshold",
    "CheckpointSelection",
    "Cross",
    "CustomModel",
    "DataSpec",
    "ExportSpec",
    "Feature",
    "KubernetesSpec",
    "Label",
    "MLPModel",
    "MPISpec",
    "ModelSpec",
    "NumericFeature",
    "ParameterServerSpec",
    "PodSettings",
    "RetrySpec",
    "Spec",
    "SpecError",
    "Threshold",
    "TrainingSpec",
    "ValidationSpec",
    "Vocabulary",
    "WideDeepModel",
    "default_artifact_root",
    "field_doc",
    "field_value",
    "label_value",
    "load_spec",
    "override_policy",
    "override_refusal",
    "partition_unit",
    "section_models",
]
