"""``tfdist``: validate a spec and print its resolved plan without running anything; write demo data.

tfdist validate SPEC.yaml
tfdist schema                      (the spec's JSON Schema, for an editor: see spec/tfdist-spec.schema.json)
tfdist plan SPEC.yaml [--logical-date 2026-11-20] [--launcher kubernetes [--kubeflow]]
tfdist models MODEL_DIR            (the versions of one model, each with its parent, and the withdrawn ones)
tfdist models withdraw MODEL_DIR VERSION --reason "..." [--by NAME]
tfdist models restore MODEL_DIR VERSION
tfdist runs DAG_ID                 (each run's window, parent, metrics, gate decision, export version)
tfdist demo [--logs DIR]           (the example DAG once on real Airflow; see tfdist.operators.demo)
tfdist --version
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import os
import sys

from tfdist.contract.layout import UnsafePipelineId, printable
from tfdist.operators.artifact_store import StoreUnreachable, connect
from tfdist.operators.plan import RunContext, build_plan, local_time, scheduled_interval, version_base
from tfdist.operators.provider_info import version
from tfdist.publishing import registry
from tfdist.spec import Spec, SpecError, default_artifact_root, load_spec


def _scheduled_run(spec_path: str, logical_date: dt.datetime | None) -> tuple[Spec, RunContext]:
    spec = load_spec(spec_path)
    start = logical_date or spec.start_date  # in the spec's time zone without one; Airflow's run ids are in UTC
    start = start.astimezone(dt.UTC) if start.tzinfo else local_time(start, spec.zone)
    start, end = scheduled_interval(spec.cron, start, spec.zone)
    return spec, RunContext(spec.name, f"scheduled__{start.isoformat()}", start, end)


def print_kubernetes_objects(spec_path: str, logical_date: dt.datetime | None, kubeflow: bool) -> None:
    """Every object a run on Kubernetes creates, stage by stage, as YAML for ``kubectl apply -f -``."""
    import yaml

    from tfdist.operators.launchers.kubernetes.objects import stage_objects

    spec, ctx = _scheduled_run(spec_path, logical_date)
    if spec.kubernetes is None:
        raise SpecError(
            ["kubernetes: required to plan a run on Kubernetes (pods.image, artifact_volume, ...)"], f"spec {spec_path}"
        )
    plan = build_plan(spec, ctx)
    for stage in plan.stages:
        print(f"# task {stage.task_id} of run {ctx.run_id}")
        print(
            yaml.safe_dump_all(stage_objects(plan, stage, kubeflow=kubeflow), sort_keys=False, explicit_start=True),
            end="",
        )


def print_plan(spec_path: str, logical_date: dt.datetime | None) -> None:
    """The run's stages as the local launcher starts them: each process's argv and the environment it adds."""
    from tfdist.operators.launchers.processes import local_processes

    spec, ctx = _scheduled_run(spec_path, logical_date)
    start, end = ctx.interval_start, ctx.interval_end
    plan = build_plan(spec, ctx)
    print(f"pipeline {spec.name}: run {ctx.run_id}, data interval {start.isoformat()} → {end.isoformat()}")
    print(f"run directory {plan.layout.run_dir}")
    print(f"export        {plan.model_dir}/<version>, version ≥ {version_base(ctx)}")
    for stage in plan.stages:
        processes = local_processes(stage, addresses=["127.0.0.1:<free port>"] * len(stage.members))
        print(f"\ntask {stage.task_id}: {len(processes)} process(es)")
        for p in processes:
            print(f"  [{p.name}] argv: {json.dumps(list(p.argv))}")
            for key, value in p.env.items():
                print(f"  [{p.name}] env {key}={value}")


def print_runs(pipeline_id: str, as_json: bool) -> None:
    """The pipeline's runs under the default artifact root, side by side (or their summaries as JSON)."""
    from tfdist.operators.report import format_runs, list_runs

    root = default_artifact_root()
    connect(root)
    found = list_runs(pipeline_id, [root])
    print(json.dumps([r.model_dump(mode="json") for r in found], indent=2) if as_json else format_runs(found))


def say(line: str) -> None:
    """Print one line, its control characters escaped (a withdrawal reason's escape codes never reach the
    terminal)."""
    print(printable(line))


def list_models(model_dir: str) -> None:
    """Each published version, newest first: its run, metrics and the version it was warm-started from (or why it
    started cold); then the withdrawn ones."""
    from tfdist.operators.report import published_versions, started_from

    found = published_versions([model_dir])
    if not found:
        raise SystemExit(f"no versions published in {model_dir}")
    for row in (m for m in found if not m.withdrawn):
        metrics = " ".join(f"{k}={v:.4f}" for k, v in sorted(row.metrics.items()))
        say(f"{row.path}  run {row.run_id}  {metrics}  {started_from(row.parent, row.cold_start)}")
    for row in found:
        if record := row.withdrawn:
            say(f"{row.path}  WITHDRAWN by {record.by} at {record.at}: {record.reason}")


MODEL_ACTIONS = ("withdraw", "restore")


def change_model(action: str, model_dir: str, version: int, reason: str, by: str) -> None:
    """Withdraw or restore a version and say what TF Serving serves now. No Asset event: the CLI does not reach
    Airflow (its database is the API server's to write, behind its auth); it prints the event to post."""
    from tfdist.operators.report import now_served

    if action == "withdraw":
        change = registry.withdraw(model_dir, version, reason, by)
        say(
            f"withdrew version {version} of {model_dir} (by {by}: {change.withdrawn.reason}); "
            f"moved to {registry.withdrawn_path(model_dir, version)}"
        )
        extra = {"withdrawn": version, "reason": change.withdrawn.reason, "by": by}
    else:
        change = registry.restore(model_dir, version)
        say(
            f"restored version {version} of {model_dir} (withdrawn by {change.withdrawn.by}: {change.withdrawn.reason})"
        )
        extra = {"restored": version, "by": by}
    say(now_served(model_dir, change.live))
    say(
        f"no Asset event was emitted (the CLI does not reach Airflow): the plugin's API route does this and emits "
        f"one; to tell the consumers of model://{os.path.basename(model_dir)} now, POST /api/v2/assets/events "
        f"with extra {json.dumps(extra)}"
    )


def models_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``models MODEL_DIR`` lists; ``models withdraw|restore MODEL_DIR VERSION`` changes one version."""
    words = args.words
    if words[0] not in MODEL_ACTIONS:
        if len(words) != 1:
            parser.error(f"models: expected MODEL_DIR, or {' or '.join(MODEL_ACTIONS)} MODEL_DIR VERSION")
        connect(words[0])
        return list_models(words[0])
    if len(words) != 3 or not registry.is_version_name(words[2]):
        parser.error(
            f"models {words[0]}: expected MODEL_DIR VERSION (ASCII digits 0-9, e.g. 202611210000), got "
            f"{' '.join(words[1:])!r}"
        )
    if words[0] == "withdraw" and args.reason is None:
        parser.error("models withdraw: --reason is required (say why the version is bad)")
    connect(words[1])
    change_model(words[0], words[1], int(words[2]), args.reason or "", args.by or getpass.getuser())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfdist", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("validate", help="validate a spec file").add_argument("spec")
    sub.add_parser("schema", help="print the spec's JSON Schema (Draft 2020-12), generated from the model")
    plan = sub.add_parser("plan", help="print the resolved plan of one scheduled run")
    plan.add_argument("spec")
    plan.add_argument(
        "--logical-date",
        type=dt.datetime.fromisoformat,
        default=None,
        help="start of the run's data interval (default: the spec's start_date)",
    )
    plan.add_argument(
        "--launcher",
        choices=["local", "kubernetes"],
        default="local",
        help="kubernetes: print the objects the run creates, as YAML documents",
    )
    plan.add_argument("--kubeflow", action="store_true", help="with kubernetes: the train stage as a TFJob or MPIJob")
    models = sub.add_parser("models", help="list a model's versions, newest first; withdraw or restore one")
    models.add_argument("words", nargs="+", metavar="MODEL_DIR | {withdraw,restore} MODEL_DIR VERSION")
    models.add_argument("--reason", help="withdraw: why the version is bad (required)")
    models.add_argument("--by", help="who withdraws or restores it (default: your user name)")
    runs = sub.add_parser("runs", help="compare a pipeline's runs side by side (from the artifact root)")
    runs.add_argument("pipeline_id", help="the DAG's id, or '<dag id>.<task group id>' for an embedded pipeline")
    runs.add_argument("--json", action="store_true", help="print the full summaries as JSON")
    demo = sub.add_parser("demo", help="write digits partitions, run the example DAG once, show its export")
    demo.add_argument("--logs", default=".demo", help="where the full Airflow log goes")
    args = parser.parse_args(argv)
    try:
        if args.command == "validate":
            spec = load_spec(args.spec)
            print(f"{args.spec}: valid (pipeline {spec.name})")
        elif args.command == "schema":
            from tfdist.spec.schema import schema_text

            sys.stdout.flush()
            sys.stdout.buffer.write(schema_text().encode())  # UTF-8 whatever the locale, as the committed file
            sys.stdout.flush()
        elif args.command == "plan" and args.launcher == "kubernetes":
            print_kubernetes_objects(args.spec, args.logical_date, args.kubeflow)
        elif args.command == "plan":
            print_plan(args.spec, args.logical_date)
        elif args.command == "runs":
            print_runs(args.pipeline_id, args.json)
        elif args.command == "models":
            models_command(models, args)
        else:
            from tfdist.operators.demo import run_demo

            return run_demo(default_artifact_root(), os.path.abspath(args.logs))
    except (SpecError, registry.RegistryError, UnsafePipelineId, StoreUnreachable) as exc:
        print(printable(str(exc)), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
