"""The spec's JSON Schema (``tfdist schema``, ``spec/tfdist-spec.schema.json``) says what the model says: it is the
one generated from the model, it accepts every example spec, and it rejects what the model rejects wherever JSON
Schema can say it. Where it cannot (rules comparing two values of a spec, or needing code), the model alone
rejects: ``MODEL_ONLY`` lists those, so the boundary is explicit; ``LAX`` lists the looser forms the model reads
and the schema does not describe."""

from __future__ import annotations

import ast
import copy
import datetime as dt
import fnmatch
import glob
import json
import os
import re
import tomllib
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.roots import REPO
from tests.support.specs import make_spec
from tfdist.operators.cli import main
from tfdist.spec import Spec, SpecError, field_doc, load_spec, override_policy, override_refusal
from tfdist.spec.schema import SCHEMA_FILE, schema_text

ROOT = "/srv/tfdist"
BASE = make_spec(ROOT)
DELETE = object()
"""A change that removes the field."""
ON_KUBERNETES = {
    "training.launcher": "kubernetes",
    "kubernetes": {
        "pods": {"image": "registry.example.com/tfdist-worker:2.21"},
        "artifact_volume": {"claim_name": "tfdist-artifacts"},
    },
}
ON_HOROVOD = {"training.backend": "mpi", "training.mpi": {"controller": "mpi"}}
ON_PARAMETER_SERVERS = {"training.strategy": "parameter_server", "training.num_ps": 2, "training.parameter_server": {}}
PARTITIONED = {"schedule": {"assets": ["s3://lake/raw/digits"], "partitions": "day"}}
CNN = {"model": {"family": "cnn", "image_shape": [8, 8, 1]}}


def validator() -> jsonschema.Draft202012Validator:
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        return jsonschema.Draft202012Validator(json.load(f))


SCHEMA = validator()


def changed(base: dict, changes: dict[str, Any]) -> dict:
    """``base`` with each '{dotted path: value}' set (list items by index), in order; DELETE removes the field."""
    spec = copy.deepcopy(base)
    for path, value in changes.items():
        *parents, leaf = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = spec
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = copy.deepcopy(value)
    return spec


def as_json(value: Any) -> Any:
    """A spec as an editor's YAML reads it: dates and times are the strings they were written as."""
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value.isoformat() if isinstance(value, dt.date) else value


def schema_errors(spec: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in SCHEMA.iter_errors(as_json(spec))]


def model_rejects(spec: dict) -> bool:
    try:
        load_spec(spec)
    except SpecError:
        return True
    return False


def test_the_committed_schema_is_the_one_generated_from_the_model():
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == schema_text(), (
        "spec/tfdist-spec.schema.json is not the model's: regenerate it with "
        "'.venv/bin/tfdist schema > spec/tfdist-spec.schema.json'"
    )


def test_tfdist_schema_prints_it_and_it_is_a_draft_2020_12_schema(capfdbinary):
    assert main(["schema"]) == 0
    printed = capfdbinary.readouterr().out.decode()
    assert printed == schema_text()
    schema = json.loads(printed)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_field_is_described_by_its_docstring():
    schema = json.loads(schema_text())
    training = schema["$defs"]["TrainingSpec"]["properties"]
    assert training["num_workers"]["description"].startswith("Training workers")
    assert schema["properties"]["data"] == {"$ref": "#/$defs/DataSpec", "description": field_doc(Spec, "data")}
    assert not [name for name, prop in training.items() if "title" in prop]  # no titles made of field names


def test_the_example_yaml_specs_name_the_schema_and_it_ships_with_the_package():
    yaml_specs = sorted(glob.glob(os.path.join(REPO, "dags", "specs", "*.y*ml")))
    assert yaml_specs
    for path in yaml_specs:
        with open(path) as f:
            first = f.readline()
        named = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)\n", first)
        assert named, f"{path}: the first line names the schema"
        assert os.path.samefile(os.path.join(os.path.dirname(path), named[1]), SCHEMA_FILE)
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["tfdist.spec"]
    assert [p for p in package_data if fnmatch.fnmatch(SCHEMA_FILE.name, p)]


def readme_examples() -> list[tuple[str, dict]]:
    """The specs of the README's (and docs') code blocks: each build_dag/load_spec dict of a Python block, each
    '"field": value' line of a block of such lines, and each YAML block of spec fields, over BASE (a block with a
    name is a whole spec)."""
    found = []
    for doc in [
        os.path.join(REPO, "README.md"),
        *sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)),
    ]:
        with open(doc) as f:
            text = f.read()
        name = os.path.relpath(doc, REPO)
        for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)):
            try:
                calls = [n for n in ast.walk(ast.parse(block)) if isinstance(n, ast.Call) and n.args]
                specs = [ast.literal_eval(c.args[0]) for c in calls if isinstance(c.args[0], ast.Dict)]
                found += [(f"{name}:python{i}", spec) for spec in specs]
            except SyntaxError:  # lines of '"field": value,' of a spec
                entries = ast.parse("{" + block + "}", mode="eval").body
                assert isinstance(entries, ast.Dict)
                for j, (key, value) in enumerate(zip(entries.keys, entries.values, strict=True)):
                    change = {ast.literal_eval(key): ast.literal_eval(value)}
                    found.append((f"{name}:python{i}.{j}", changed(BASE, change)))
        for i, block in enumerate(re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)):
            fragment = yaml.safe_load(block)
            if isinstance(fragment, dict) and set(fragment) <= set(Spec.model_fields):
                found.append((f"{name}:yaml{i}", fragment if "name" in fragment else merged(BASE, fragment)))
    return found


def merged(base: dict, fragment: dict) -> dict:
    spec = copy.deepcopy(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = merged(spec[key], value)
        else:
            spec[key] = value
    return spec


def example_specs() -> list[Any]:
    specs = [pytest.param(BASE, id="conftest.make_spec")]
    for path in sorted(glob.glob(os.path.join(REPO, "dags", "specs", "*.y*ml"))):
        with open(path) as f:
            specs.append(pytest.param(yaml.safe_load(f), id=os.path.relpath(path, REPO)))
    return specs + [pytest.param(spec, id=name) for name, spec in readme_examples()]


GOOD = {
    "schedule null": {"schedule": None},
    "schedule assets any": {"schedule": {"assets": ["s3://lake/raw/digits", "file:///data/labels"], "when": "any"}},
    "schedule asset or time": {"schedule": {"assets": ["s3://lake/raw/digits"], "cron": "0 3 * * *"}},
    "schedule partitioned day": {
        "schedule": {"assets": ["s3://lake/raw/digits"], "partitions": "day", "partition_key_format": "%Y-%m-%d"}
    },
    "schedule partitioned hour": {
        "schedule": {"assets": ["s3://lake/raw/digits"], "partitions": "hour"},
        "data.source": "s3://lake/raw/digits/{date}/{hour:>02}/*.csv",
    },
    "schedule partitioned year by months": {
        "schedule": {"assets": ["s3://lake/raw/digits"], "partitions": "year"},
        "data.source": "/data/{year}/{month}/part.parquet",
        "data.format": "parquet",
    },
    "start_date with time": {"start_date": "2026-11-01 03:00"},
    "start_date with zone": {"start_date": "2026-11-01T03:00:00.5+02:00"},
    "start_date utc": {"start_date": "2026-11-01t03:00:00Z"},
    "artifact_root home": {"artifact_root": "~/tfdist"},
    "artifact_root variable": {"artifact_root": "$HOME/tfdist"},
    "artifact_root in s3": {"artifact_root": "s3://ml-artifacts/tfdist/"},
    "pods without a volume, artifacts in s3": {
        **ON_KUBERNETES,
        "kubernetes.artifact_volume": DELETE,
        "kubernetes.credentials_secret": "store-credentials",
        "artifact_root": "s3://ml-artifacts/tfdist",
    },
    "artifact_root in gcs, export root in s3": {
        "artifact_root": "gs://ml_artifacts",
        "export.root": "s3://models/churn",
    },
    "source escaped braces": {"data.source": "s3://bucket/{{literal}}/{date}.csv"},
    "warm_start word": {"training.warm_start": "baseline"},
    "warm_start section": {"training.warm_start": {"from": "baseline", "on_mismatch": "fail"}},
    "approval true": {"export.approval": True},
    "approval false": {"export.approval": False},
    "approval on timeout": {"export.approval": {"timeout_minutes": 60, "on_timeout": "approve"}},
    "approvers": {
        "export.approval": {"approvers": {"users": ["ana@example.com"], "roles": ["op"]}, "four_eyes": False}
    },
    "approvers by role": {"export.approval": {"approvers": {"roles": ["admin"], "users": []}}},
    "export root": {"export.root": "/srv/tfdist/published", "export.keep_versions": 3},
    "kubernetes": {
        **ON_KUBERNETES,
        "kubernetes.roles": {"worker": {"cpu": "8", "memory": "16Gi", "node_selector": {"gpu": "yes"}}},
        "kubernetes.log_members": "all",
        "kubernetes.operator": "kubeflow",
    },
    "horovod": {**ON_HOROVOD, "training.mpi.extra_args": ["--bind-to", "none", "-npernode=1"]},
    "parameter servers": {"training.strategy": "parameter_server", "training.num_ps": 1},
    "elastic": {"training.min_workers": 1, "training.max_restarts": 5},
    "no gate, said so": {"validation": {"allow_unvalidated": True}},
    "change thresholds only": {"validation": {"change_thresholds": {"loss": {"direction": "lower_is_better"}}}},
    "metrics and best checkpoint": {
        "model.metrics": ["accuracy", "top_5_accuracy"],
        "validation.thresholds.top_5_accuracy": {"upper": 1},
        "validation.checkpoint": {"mode": "best", "metric": "loss", "direction": "lower_is_better"},
    },
    "cnn": CNN,
    "custom": {"model": {"family": "custom", "factory": "my_models.digits:build", "kwargs": {"width": 2}}},
    "data checks": {"data.checks": {"mode": "warn", "bounds": {"features": {"pixel": {"lower": 0, "upper": 16}}}}},
    "overridable": {"overridable": ["training.epochs", "model.learning_rate", "data.window"]},
    "training extras": {"training.tensorboard_url": "https://tb.example.com/ml/", "training.pool": "gpu_pool"},
    "retries": {"retries": {"train": 0, "delay_seconds": 5}},
}


@pytest.mark.parametrize(
    "spec", [*example_specs(), *(pytest.param(changed(BASE, c), id=name) for name, c in GOOD.items())]
)
def test_the_schema_accepts_every_example_spec(spec):
    load_spec(spec)
    assert schema_errors(spec) == []


def test_the_readme_examples_are_found():
    names = [name for name, _ in readme_examples()]
    assert any("python" in n for n in names) and any("yaml" in n for n in names), names


BAD = {
    # unknown keys, at each level
    "unknown top-level key": {"nmae": "digits"},
    "unknown data key": {"data.sourc": "x"},
    "unknown feature key": {"data.features.0.dtype": "float32"},
    "unknown label key": {"data.label.classes": 10},
    "unknown data check key": {"data.checks.drift.max_div": 0.1},
    "unknown model key": {"model.layers": [64]},
    "unknown training key": {"training.num_worker": 2},
    "unknown mpi key": {**ON_HOROVOD, "training.mpi.slots": 2},
    "unknown warm start key": {"training.warm_start": {"form": "baseline"}},
    "unknown validation key": {"validation.threshold": {}},
    "unknown threshold key": {"validation.thresholds.accuracy": {"min": 0.9}},
    "unknown checkpoint key": {"validation.checkpoint.by": "loss"},
    "unknown export key": {"export.name": "digits"},
    "unknown approval key": {"export.approval": {"timeout": 5}},
    "unknown approvers key": {"export.approval": {"approvers": {"user": ["ana"]}}},
    "a viewer approves": {"export.approval": {"approvers": {"roles": ["viewer"]}}},
    "an approver with a space": {"export.approval": {"approvers": {"users": ["ana bo"]}}},
    "unknown retries key": {"retries.training": 2},
    "unknown schedule key": {"schedule": {"asset": ["s3://lake/raw"]}},
    "unknown kubernetes key": {**ON_KUBERNETES, "kubernetes.volume": "x"},
    "unknown pods key": {**ON_KUBERNETES, "kubernetes.pods.gpu": 1},
    "unknown role key": {**ON_KUBERNETES, "kubernetes.roles": {"worker": {"gpus": 1}}},
    "unknown volume key": {**ON_KUBERNETES, "kubernetes.artifact_volume.claim": "x"},
    # wrong types
    "name a number": {"name": 123},
    "num_workers a word": {"training.num_workers": "two"},
    "epochs a fraction": {"training.epochs": 1.5},
    "catchup a word": {"catchup": "sometimes"},
    "features a mapping": {"data.features": {"name": "pixel"}},
    "tags a string": {"tags": "a,b"},
    "hidden_units a number": {"model.hidden_units": 128},
    "training null": {"training": None},
    "threshold a word": {"validation.thresholds.accuracy.lower": "high"},
    "label value a number": {**ON_KUBERNETES, "kubernetes.labels": {"team": 1}},
    "schedule a number": {"schedule": 5},
    "start_date a list": {"start_date": [2026, 11, 1]},
    "description null": {"description": None},
    # out of range
    "no workers": {"training.num_workers": 0},
    "too many workers": {"training.num_workers": 65},
    "no shards": {"data.num_shards": 0},
    "too many shards": {"data.num_shards": 2000},
    "eval_fraction 1": {"data.eval_fraction": 1.0},
    "eval_fraction 0": {"data.eval_fraction": 0},
    "dropout 1": {"model.dropout": 1.0},
    "learning_rate 0": {"model.learning_rate": 0},
    "learning_rate 11": {"model.learning_rate": 11},
    "retries 11": {"retries.train": 11},
    "feature shape 0": {"data.features.0.shape": [0]},
    "feature shape rank 4": {"data.features.0.shape": [1, 1, 1, 64]},
    "one class": {"data.label.num_classes": 1},
    "hang timeout 5s": {"training.hang_timeout_seconds": 5},
    "name too long": {"name": "d" * 201},
    "rows max_ratio below 1": {"data.checks.rows.max_ratio": 0.5},
    "image_shape rank 2": {"model": {"family": "cnn", "image_shape": [8, 8]}},
    "no features": {"data.features": []},
    "no assets": {"schedule": {"assets": []}},
    # bad enum values
    "format xlsx": {"data.format": "xlsx"},
    "optimizer adagrad": {"model.optimizer": "adagrad"},
    "backend nccl": {"training.backend": "nccl"},
    "launcher slurm": {"training.launcher": "slurm"},
    "on_failure retry": {"validation.on_failure": "retry"},
    "pull policy": {**ON_KUBERNETES, "kubernetes.image_pull_policy": "Sometimes"},
    "role driver": {**ON_KUBERNETES, "kubernetes.roles": {"driver": {"cpu": "1"}}},
    "metric f1": {"model.metrics": ["f1"]},
    "warm_start latest": {"training.warm_start": "latest"},
    "when some": {"schedule": {"assets": ["s3://lake/raw"], "when": "some"}},
    "log_members some": {**ON_KUBERNETES, "kubernetes.log_members": "some"},
    "partitions fortnight": {"schedule": {"assets": ["s3://lake/raw"], "partitions": "fortnight"}},
    "check mode loud": {"data.checks.drift.mode": "loud"},
    "threshold of an unknown metric": {"validation.thresholds.f1": {"lower": 0.9}},
    "best checkpoint by an unknown metric": {"validation.checkpoint": {"mode": "best", "metric": "f1"}},
    # bad patterns
    "name with a space": {"name": "my pipeline"},
    "feature name a number": {"data.features.0.name": "1pixel"},
    "model_name with a slash": {"export.model_name": "digits/v1"},
    "factory without a function": {"model": {"family": "custom", "factory": "my_models.build"}},
    "tensorboard_url without scheme": {"training.tensorboard_url": "tb:6006"},
    "pool with a space": {"training.pool": "my pool"},
    "namespace uppercase": {**ON_KUBERNETES, "kubernetes.namespace": "ML"},
    "memory 8GB": {**ON_KUBERNETES, "kubernetes.pods.memory": "8GB"},
    "claim uppercase": {**ON_KUBERNETES, "kubernetes.artifact_volume.claim_name": "Tfdist_Artifacts"},
    "unknown placeholder": {"data.source": "{artifact_root}/raw/{dat}/*.csv"},
    "positional placeholder": {"data.source": "/data/{}/*.csv"},
    "unbalanced brace": {"data.source": "/data/{date/*.csv"},
    "reserved mpirun argument": {**ON_HOROVOD, "training.mpi.extra_args": ["-H", "a,b"]},
    "reserved mpirun argument with value": {**ON_HOROVOD, "training.mpi.extra_args": ["--hostfile=/tmp/hosts"]},
    "mpirun argument with a newline": {**ON_HOROVOD, "training.mpi.extra_args": ["--bind-to\nnone"]},
    "artifact_root relative": {"artifact_root": "tfdist/artifacts"},
    "artifact_root an https URL": {"artifact_root": "https://bucket/tfdist"},
    "artifact_root with credentials": {"artifact_root": "s3://AKIAKEY:secret@bucket/tfdist"},
    "artifact_root no bucket name": {"artifact_root": "s3://Bucket/tfdist"},
    "artifact_root an empty prefix part": {"artifact_root": "gs://bucket//tfdist"},
    "export.root a dotted prefix": {"export.root": "s3://bucket/models/../other"},
    "export root relative": {"export.root": "models"},
    "start_date a word": {"start_date": "tomorrow"},
    "start_date month 13": {"start_date": "2026-13-01"},
    "asset without scheme": {"schedule": {"assets": ["raw/digits"]}},
    "asset scheme airflow": {"schedule": {"assets": ["airflow://lake/raw"]}},
    "asset with a space": {"schedule": {"assets": ["s3://lake/raw digits"]}},
    "asset not ascii": {"schedule": {"assets": ["s3://lake/données"]}},
    "asset twice": {"schedule": {"assets": ["s3://lake/raw", "s3://lake/raw"]}},
    "partition key format": {"schedule": {"assets": ["s3://lake/raw"], "partition_key_format": "YYYY-MM-DD"}},
    "overridable author-only": {"overridable": ["export.model_name"]},
    "overridable free-form": {"overridable": ["data.source"]},
    "overridable a section": {"overridable": ["training"]},
    "overridable no field": {"overridable": ["training.nonexistent"]},
    # a missing required field
    **{f"no {field}": {field: DELETE} for field in ("name", "start_date", "data", "model", "export", "validation")},
    "no data.source": {"data.source": DELETE},
    "no data.label": {"data.label": DELETE},
    "no feature name": {"data.features.0.name": DELETE},
    "no model_name": {"export.model_name": DELETE},
    "no cnn image_shape": {"model": {"family": "cnn"}},
    "no custom factory": {"model": {"family": "custom"}},
    # tasks and categorical features
    "unknown feature kind": {"data.features": [{"name": "c", "kind": "text"}]},
    "shape on a categorical": {"data.features": [{"name": "c", "kind": "categorical", "shape": [2]}]},
    "no pods": {**ON_KUBERNETES, "kubernetes.pods": DELETE},
    "no pod image": {**ON_KUBERNETES, "kubernetes.pods": {"cpu": "4"}},
    # a wrong model family
    "family transformer": {"model.family": "transformer"},
    "no family": {"model.family": DELETE},
    "mlp with a cnn field": {"model.image_shape": [8, 8, 1]},
    "cnn with an mlp field": {"model": {"family": "cnn", "image_shape": [8, 8, 1], "hidden_units": [64]}},
}


@pytest.mark.parametrize("change", [pytest.param(c, id=name) for name, c in BAD.items()])
def test_the_schema_rejects_what_the_model_rejects(change):
    spec = changed(BASE, change)
    assert model_rejects(spec)
    assert schema_errors(spec)


MODEL_ONLY = {
    "no artifact volume with a local root": {**ON_KUBERNETES, "kubernetes.artifact_volume": DELETE},
    "an artifact volume with a bucket root": {**ON_KUBERNETES, "artifact_root": "s3://ml-artifacts/tfdist"},
    "lower above upper": {"validation.thresholds.accuracy": {"lower": 0.9, "upper": 0.5}},
    "min_workers above num_workers": {"training.min_workers": 3},
    "no elastic size splits the batch": {
        "training.num_workers": 4,
        "training.min_workers": 3,
        "training.global_batch_size": 64,
    },
    "batch not split evenly": {"training.global_batch_size": 63},
    "fewer shards than readers": {"data.num_shards": 1},
    "features named twice": {"data.features": [{"name": "pixel", "shape": [32]}, {"name": "pixel", "shape": [32]}]},
    "feature named as the label": {"data.features.0.name": "label"},
    "bounds of no feature": {"data.checks.bounds.features": {"pixels": {"lower": 0}}},
    "threshold of a metric the model does not report": {"validation.thresholds.top_5_accuracy": {"lower": 0.9}},
    "default checkpoint metric not reported": {"model.metrics": []},
    "cnn image_shape not the features' size": {"model": {"family": "cnn", "image_shape": [4, 4, 1]}},
    "slots not one per gpu": {**ON_HOROVOD, "training.gpus_per_worker": 2, "training.mpi.slots_per_worker": 1},
    "mpirun arguments with gloo": {
        **ON_HOROVOD,
        "training.mpi.controller": "gloo",
        "training.mpi.extra_args": ["--bind-to", "none"],
    },
    "mpirun arguments with elastic horovod": {
        **ON_HOROVOD,
        "training.min_workers": 1,
        "training.mpi.extra_args": ["--bind-to", "none"],
    },
    "invalid cron": {"schedule": "0 25 * * *"},
    "invalid cron of an asset schedule": {"schedule": {"assets": ["s3://lake/raw"], "cron": "every day"}},
    "asset with a password": {"schedule": {"assets": ["s3://user:secret@lake/raw"]}},
    "asset with a fragment": {"schedule": {"assets": ["s3://lake/raw#part"]}},
    "start_date february 30": {"start_date": "2026-02-30"},
    "artifact_root of an unset variable": {"artifact_root": "$TFDIST_SURELY_UNSET_VARIABLE/artifacts"},
    "pods' source off the artifact volume": {**ON_KUBERNETES, "data.source": "/data/{date}/*.csv"},
    "pods' export root off the artifact volume": {**ON_KUBERNETES, "export.root": "/models"},
    "overriding mpi settings without them": {"overridable": ["training.mpi.slots_per_worker"]},
    "overriding another family's field": {"overridable": ["model.filters"]},
    "binary with num_classes": {"data.label": {"name": "label", "task": "binary", "num_classes": 2}},
    "regression with classes": {"data.label": {"name": "label", "task": "regression", "classes": ["a", "b"]}},
    "vocabulary and hash_buckets": {
        "data.features": [{"name": "c", "kind": "categorical", "vocabulary": {}, "hash_buckets": 10}]
    },
    "list separator a comma": {"data.features": [{"name": "c", "kind": "categorical_list", "separator": ","}]},
    "a metric of another task": {"validation.thresholds.rmse": {"upper": 1.0}},
    "a cross of a numeric feature": {"model": {"family": "wide_deep", "crosses": [{"features": ["pixels", "x"]}]}},
}
"""Specs the model rejects and the schema accepts: rules comparing two values of a spec, or needing code."""


@pytest.mark.parametrize("change", [pytest.param(c, id=name) for name, c in MODEL_ONLY.items()])
def test_what_only_the_model_rejects(change):
    spec = changed(BASE, change)
    assert model_rejects(spec)
    assert schema_errors(spec) == []


LAX = {
    "a number as a string": {"training.num_workers": "2"},
    "a yes/no as a word": {"catchup": "yes"},
    "a Unix time as start_date": {"start_date": 1793491200},
}
"""Specs the model reads (pydantic's lax mode) and the schema flags: forms it does not describe."""


@pytest.mark.parametrize("change", [pytest.param(c, id=name) for name, c in LAX.items()])
def test_what_the_model_reads_and_the_schema_does_not_describe(change):
    spec = changed(BASE, change)
    load_spec(spec)
    assert schema_errors(spec)


def with_path(path: str) -> dict:
    """BASE where the field at ``path`` exists: Horovod settings for 'training.mpi', parameter servers for
    'training.parameter_server', the family holding a 'model' field."""
    spec = changed(BASE, ON_HOROVOD) if path.startswith("training.mpi.") else BASE
    if path.startswith("training.parameter_server."):
        spec = changed(spec, ON_PARAMETER_SERVERS)
    if path.startswith("model."):
        family = next(
            m for m in ("mlp", "wide_deep", "cnn", "custom") if path.removeprefix("model.") in family_fields(m)
        )
        models = {
            "mlp": BASE["model"],
            "wide_deep": {"family": "wide_deep"},
            "cnn": CNN["model"],
            "custom": {"family": "custom", "factory": "m:f"},
        }
        spec = changed(spec, {"model": models[family]})
    return changed(spec, {"overridable": [path]})


def family_fields(family: str) -> set[str]:
    schema = json.loads(schema_text())
    return set(
        schema["$defs"][schema["properties"]["model"]["discriminator"]["mapping"][family].split("/")[-1]]["properties"]
    )


def leaf_paths(schema: dict, node: dict, prefix: str = "") -> list[str]:
    """The dotted path of every field of the schema, below sections too."""
    refs = [node.get("$ref")] + [n.get("$ref") for key in ("allOf", "anyOf", "oneOf") for n in node.get(key, [])]
    sections = [schema["$defs"][r.split("/")[-1]] for r in refs if r]
    fields = {name: prop for section in [node, *sections] for name, prop in section.get("properties", {}).items()}
    if not fields:
        return [prefix.rstrip(".")]
    return [path for name, prop in fields.items() for path in leaf_paths(schema, prop, f"{prefix}{name}.")]


SCHEMA_DICT = json.loads(schema_text())
OVERRIDE_PATHS = sorted({*override_policy(Spec), *leaf_paths(SCHEMA_DICT, SCHEMA_DICT)})


@pytest.mark.parametrize("path", OVERRIDE_PATHS)
def test_the_schema_names_exactly_the_fields_a_run_may_override(path):
    refusal = override_refusal(Spec, path)
    spec = with_path(path)
    assert model_rejects(spec) == bool(refusal)
    assert bool(schema_errors(spec)) == bool(refusal)
