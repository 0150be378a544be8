"""What both sides use beneath the contract, knowing nothing of tfdist's records: artifacts at a local path or in an
object store, written whole (``storage``); JSON files written whole, checksums (``jsonfiles``); how a stage's
processes are stopped: SIGTERM, a grace period, SIGKILL, the same for the local launcher and a pod (``stopping``).
It imports neither Airflow nor TensorFlow, nor any other part of tfdist."""
