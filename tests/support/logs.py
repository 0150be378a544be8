"""Loggers whose lines a test reads (a stage's log, as the Airflow task log would show it)."""

from __future__ import annotations

import logging


class Lines(logging.Handler):
    """Collects formatted log lines; ``on_line`` may react to each one."""

    def __init__(self, on_line=None):
        super().__init__()
        self.lines: list[str] = []
        self.on_line = on_line

    def emit(self, record):
        line = record.getMessage()
        self.lines.append(line)
        if self.on_line:
            self.on_line(line)


def collecting_logger(name: str, on_line=None) -> tuple[logging.Logger, Lines]:
    logger = logging.getLogger(f"tfdist.test.{name}")
    logger.setLevel(logging.INFO)
    handler = Lines(on_line)
    logger.handlers = [handler]
    return logger, handler
