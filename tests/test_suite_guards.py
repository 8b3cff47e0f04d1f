"""The suite's own pytest settings (pyproject.toml) end a run whose worker crashes or hangs.

xdist 3.8.0's loadgroup scheduler hangs when it replaces a crashed worker (pytest-xdist
#1323/#1327); one CI run sat at its 5400 s limit after a worker segfaulted. These tests run a
small throwaway suite with the project's addopts and ini settings and check that a segfaulting
test and a hanging test each end the run quickly, reported as failed by name.
"""

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project_ini():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def _run_throwaway_suite(tmp_path, body, **ini_overrides):
    """Runs ``body`` as a test file under the project's pytest settings; returns the output."""
    (tmp_path / "test_throwaway.py").write_text(textwrap.dedent(body))
    ini = _project_ini()
    overrides = {k: v for k, v in ini.items() if k.startswith("faulthandler")}
    overrides.update(ini_overrides)
    cmd = [sys.executable, "-m", "pytest", *ini["addopts"].split(), "-p", "no:cacheprovider",
           "-o", "addopts=", "--rootdir", str(tmp_path), "-c", os.devnull]
    for key, value in overrides.items():
        value = str(value).lower() if isinstance(value, bool) else str(value)
        cmd += ["-o", f"{key}={value}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    done = subprocess.run(cmd + ["test_throwaway.py"], cwd=tmp_path, env=env, timeout=60,
                          capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def test_the_project_settings_end_a_run_whose_worker_segfaults(tmp_path):
    rc, out = _run_throwaway_suite(tmp_path, """
        import ctypes, time
        import pytest

        @pytest.mark.xdist_group("shared")
        def test_before():
            time.sleep(0.5)

        @pytest.mark.xdist_group("shared")
        def test_segfaults():
            time.sleep(1.0)
            ctypes.string_at(0)

        @pytest.mark.xdist_group("shared")
        def test_after():
            pass

        def test_elsewhere():
            time.sleep(2.0)
    """)
    assert rc == 1, out
    assert "crashed while running 'test_throwaway.py::test_segfaults'" in out, out


def test_the_project_settings_end_a_run_whose_test_hangs(tmp_path):
    assert float(_project_ini()["faulthandler_timeout"]) > 0
    rc, out = _run_throwaway_suite(tmp_path, """
        import time

        def test_hangs():
            time.sleep(600)

        def test_quick():
            pass
    """, faulthandler_timeout=2)  # the project's value, shortened; exit_on_timeout is the project's
    assert rc == 1, out
    assert "crashed while running 'test_throwaway.py::test_hangs'" in out, out
