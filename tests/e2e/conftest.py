"""Shared pieces of the end-to-end tests: a summary section for measured numbers, and ctest's
skip code.

- Tests call the `report` fixture with a line (a WER, a count); the lines are printed in a
  "waav e2e report" section at the end of the run even when every test passes (pytest otherwise
  hides a passing test's output).
- When tests ran but every one of them was skipped (no waav binary, no model, no shared data), the
  run exits with 77, which CMake registers as SKIP_RETURN_CODE, so ctest says "Skipped" instead of
  "Passed"; the reasons are in the output (-rs).
"""

from __future__ import annotations

import pytest

SKIP_RETURN_CODE = 77

_report_lines: list[str] = []
_outcomes = {"passed": 0, "failed": 0, "skipped": 0}


@pytest.fixture
def report():
    return _report_lines.append


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter):
    if _report_lines:
        terminalreporter.section("waav e2e report")
        for line in _report_lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    if (
        exitstatus == pytest.ExitCode.OK
        and _outcomes["skipped"] > 0
        and _outcomes["passed"] == 0
        and _outcomes["failed"] == 0
    ):
        session.exitstatus = SKIP_RETURN_CODE
