"""operators/page_urls.py: the training-runs page's address inside Airflow's UI, under its base path."""

from __future__ import annotations

from tfdist.operators.page_urls import base_path, page_url


def test_links_lead_into_airflows_ui_under_its_base_path(monkeypatch):
    assert page_url("digits", run="manual__2026-11-24T10:00:00+00:00") == (
        "/plugin/training-runs/tfdist/ui/digits?run=manual__2026-11-24T10%3A00%3A00%2B00%3A00"
    )
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/ml/")
    assert page_url("digits", version=7) == "/ml/plugin/training-runs/ml/tfdist/ui/digits?version=7"


def test_the_base_path_is_the_base_urls_path_without_its_trailing_slash(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    assert base_path() == ""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://localhost:8080/")
    assert base_path() == ""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://localhost:8080/a/b/")
    assert base_path() == "/a/b"


def test_a_pipeline_id_is_one_path_segment_and_no_query_means_no_question_mark(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "")
    assert page_url("nightly.digits/x y") == "/plugin/training-runs/tfdist/ui/nightly.digits%2Fx%20y"
