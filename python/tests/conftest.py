"""Countable, refusable skips for the Python tests (the rule of crates/tailprof-testkit).

A test that lacks something skips with a reason that starts with the need's name, e.g.
``pytest.skip("python3-dev: no Python headers")``. Every skip is appended to
``$TAILPROF_SKIP_LOG`` (``need<TAB>test<TAB>why``) when set, and becomes a failure when
``$TAILPROF_REQUIRE`` (comma-separated needs, or ``all``) names its need: CI has it, so
the test must not skip. ``fact`` skips are never required.
"""

import os

import pytest


def _need_and_why(reason):
    reason = reason.strip()
    if reason.startswith("Skipped: "):
        reason = reason[len("Skipped: "):]
    need, sep, why = reason.partition(":")
    if not sep or not need or " " in need.strip():
        return "unknown", reason
    return need.strip(), why.strip()


def _required(need):
    words = [w.strip() for w in os.environ.get("TAILPROF_REQUIRE", "").split(",")]
    return need != "fact" and ("all" in words or need in words)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    need, why = _need_and_why(reason)
    why = " ".join(why.split())[:400]
    log = os.environ.get("TAILPROF_SKIP_LOG")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{need}\tpytest::{item.nodeid}\t{why}\n".encode())
        finally:
            os.close(fd)
    if _required(need):
        report.outcome = "failed"
        report.longrepr = (f"TAILPROF_REQUIRE names `{need}`: this machine (CI) has it, "
                           f"but {item.nodeid} skipped: {why}")
