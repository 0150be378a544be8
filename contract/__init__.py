"""The contract between the Airflow side (``tfdist.operators``) and the worker runtime (``tfdist.trainer``): the wire
formats both sides read and write, and how a stage is started. It imports neither Airflow nor TensorFlow, so a worker
image and the Airflow side cannot drift apart. Import each name from its module:

- ``layout``: the run key, the run's file layout and its record;
- ``stages``: each stage's typed command line;
- ``launch``: exit codes, environment names, a member's TF_CONFIG, the mpirun argv and its rank tags, the pod
  entrypoint's argv and the result it hands back;
- ``progress``: heartbeats, the progress record, the training curve, the latest checkpoint's step.

Each stage writes its result record, the task's XCom value, as ``<run dir>/<task id>/result.json``: at most
RESULT_MAX_BYTES of JSON, so that on Kubernetes it travels back as the pod's termination message and the
Airflow side never reads the artifact volume. Storage and stopping live in ``tfdist.infra``; the published versions,
the gates and the approval in ``tfdist.publishing``."""
