"""The contract between the Airflow side (``tfdist.operators``) and the worker runtime (``tfdist.trainer``):
what both sides read and write, and how a stage is started and stopped. Both sides import it; it imports
neither Airflow nor TensorFlow, so a worker image and the Airflow side cannot drift apart. The Airflow side
reaches the worker runtime only through this package and the spec model (``tfdist.spec``).

- ``layout``: the run key, the run's file layout and its record;
- ``stages``: each stage's typed command line;
- ``launch``: exit codes, environment names, a member's TF_CONFIG, the mpirun argv and its rank tags, the pod
  entrypoint's argv and the result it hands back;
- ``progress``: heartbeats, the progress record, the training curve, the latest checkpoint's step;
- ``storage``: artifacts at a local path or in an object store (s3://, gs://), written whole;
- ``records``: JSON records written atomically, checksums;
- ``registry``: the published versions of a model; ``gate``: the gate's rules; ``data_gate``: the data
  gate's checks; ``approval``: the human approval before publishing; ``stopping``: how processes are stopped.

Each stage writes its result record, the task's XCom value, as ``<run dir>/<task id>/result.json``: at most
RESULT_MAX_BYTES of JSON, so that on Kubernetes it travels back as the pod's termination message and the
Airflow side never reads the artifact volume."""

from tfdist.contract.launch import (
    CORES_ENV,
    EXIT_HUNG,
    EXIT_REFUSED,
    HOROVOD_SHARED_CORES_ENV,
    HOST_DISCOVERY_SCRIPT,
    HOSTS_ENV,
    RANK_TAG,
    RENDEZVOUS_PORT,
    RESULT_MAX_BYTES,
    RUN_ENV,
    SCRATCH_ENV,
    SPEC_ENV,
    TERMINATION_LOG,
    TF_PORT,
    THREADS_ENV,
    encode_result,
    mpirun_argv,
    pod_argv,
    rank_tag,
    split_rank_tags,
    tf_config,
)
from tfdist.contract.layout import (
    BLESSING,
    CONTROL_CHARACTERS,
    MANIFEST,
    RUN_KEY_READABLE,
    RunLayout,
    RunMismatch,
    UnsafePipelineId,
    printable,
    record_run,
    run_key,
    run_path,
    runs_root,
)
from tfdist.contract.progress import (
    CHECKPOINT_STATE,
    Beat,
    CurveWrite,
    TrainProgress,
    beat,
    checkpoint_state,
    checkpoint_step,
    curve_line,
    kept_checkpoints,
    last_beats,
    longest_silent,
    read_curve,
    stalled,
    warm_start_summary,
)
from tfdist.contract.records import (
    digest_json,
    read_json,
    read_json_if_exists,
    sha256_file,
    write_json_atomic,
)
from tfdist.contract.stages import (
    WORKER_PACKAGE,
    EvaluateArgs,
    ExportArgs,
    PrepareArgs,
    StageArgs,
    TrainArgs,
    ValidateDataArgs,
    worker_command,
)

__all__ = [
    "BLESSING",
    "CHECKPOINT_STATE",
    "CONTROL_CHARACTERS",
    "CORES_ENV",
    "EXIT_HUNG",
    "EXIT_REFUSED",
    "HOROVOD_SHARED_CORES_ENV",
    "HOSTS_ENV",
    "HOST_DISCOVERY_SCRIPT",
    "MANIFEST",
    "RANK_TAG",
    "RENDEZVOUS_PORT",
    "RESULT_MAX_BYTES",
    "RUN_ENV",
    "RUN_KEY_READABLE",
    "SCRATCH_ENV",
    "SPEC_ENV",
    "TERMINATION_LOG",
    "TF_PORT",
    "THREADS_ENV",
    "WORKER_PACKAGE",
    "Beat",
    "CurveWrite",
    "EvaluateArgs",
    "ExportArgs",
    "PrepareArgs",
    "RunLayout",
    "RunMismatch",
    "StageArgs",
    "TrainArgs",
    "TrainProgress",
    "UnsafePipelineId",
    "ValidateDataArgs",
    "beat",
    "checkpoint_state",
    "checkpoint_step",
    "curve_line",
    "digest_json",
    "encode_result",
    "kept_checkpoints",
    "last_beats",
    "longest_silent",
    "mpirun_argv",
    "pod_argv",
    "printable",
    "rank_tag",
    "read_curve",
    "read_json",
    "read_json_if_exists",
    "record_run",
    "run_key",
    "run_path",
    "runs_root",
    "sha256_file",
    "split_rank_tags",
    "stalled",
    "tf_config",
    "warm_start_summary",
    "worker_command",
    "write_json_atomic",
]
