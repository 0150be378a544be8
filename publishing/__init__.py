"""The services that decide and keep what is published, used by both sides: the published versions of a model, their
withdrawal, lineage and the baseline (``registry``); the gate's rules (``gate``); the data gate's checks
(``data_gate``); the human approval before publishing (``approval``). It imports neither Airflow nor TensorFlow."""
