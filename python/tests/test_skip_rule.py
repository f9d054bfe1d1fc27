"""conftest.py's skip rule, run on a throwaway test file in a child pytest."""

import os
import shutil
import subprocess
import sys

PROBE = '''
import pytest
def test_go():
    pytest.skip("go: no go here")
def test_fact():
    pytest.skip("fact: a fact")
def test_ok():
    pass
'''


def run(tmp_path, require):
    shutil.copy(os.path.join(os.path.dirname(__file__), "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(PROBE)
    log = tmp_path / "skips.log"
    env = dict(os.environ, TAILPROF_SKIP_LOG=str(log))
    env.pop("TAILPROF_REQUIRE", None)
    if require is not None:
        env["TAILPROF_REQUIRE"] = require
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    return p, log.read_text().splitlines() if log.exists() else []


def test_skips_are_logged_by_need_and_pass_when_not_required(tmp_path):
    p, lines = run(tmp_path, "cc,root")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [l.split("\t")[0] for l in lines] == ["go", "fact"]
    assert lines[0].endswith("\tno go here")


def test_a_required_need_that_skips_fails(tmp_path):
    for require in ("go", "all"):
        p, _ = run(tmp_path, require)
        assert p.returncode != 0
        assert "TAILPROF_REQUIRE names `go`" in p.stdout
        assert "1 failed, 1 passed, 1 skipped" in p.stdout
