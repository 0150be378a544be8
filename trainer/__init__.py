"""Worker runtime: runs inside each training process or container. Needs TensorFlow (+ Horovod), never Airflow.

Every stage is a module run as ``python -m tfdist.trainer.<stage>``; it reads the run's effective spec
(``spec.json``, written by the operator, validated again as ``tfdist.spec.Spec``) and the paths given
on its command line."""
