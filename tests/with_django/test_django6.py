"""Django's own `django.tasks` (Django 6, which needs Python 3.12 or newer): this folder's
tests run again under a Python >= 3.12 with Django 6, when the suite itself runs on an
older Python (CI's default, 3.11, with Django 5.2 and the django-tasks backport).

The interpreter is `LANNER_PYTHON312` if set, else the first Python >= 3.12 under pyenv
(~/.pyenv/versions/3.1[2-9]*), or python3.12 or python3.13 on PATH. Its virtual
environment is made once in `.ci-venv312` at the top of the repository (only lanner,
Django 6, pytest and redis: what these tests import; about a minute) and reused while its
requirements stay the same. Under CI=true a missing interpreter is a failure, never a skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".ci-venv312"
REQUIREMENTS = ["django>=6", "pytest>=8", "pytest-timeout>=2.3", "redis>=5", "hiredis>=2"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(sys.version_info >= (3, 12), reason="this run has Django 6 itself"),
]


def newer_python() -> str | None:
    """The first interpreter found that runs and is Python >= 3.12 (pyenv's shims may name
    one that the current pyenv version does not provide)."""
    given = os.environ.get("LANNER_PYTHON312")
    if given:
        return given
    pyenv = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
    on_path = [shutil.which(name) for name in ("python3.12", "python3.13")]
    for candidate in [*pyenv, *[found for found in on_path if found]]:
        check = [candidate, "-c", "import sys; assert sys.version_info >= (3, 12)"]
        if subprocess.run(check, capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def venv_python(interpreter: str) -> Path:
    """The venv's Python, made (or made again) for REQUIREMENTS and this checkout."""
    python = VENV / "bin" / "python"
    stamp = VENV / "lanner-requirements.txt"
    wanted = "\n".join([interpreter, str(ROOT), *REQUIREMENTS])
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([interpreter, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-e", str(ROOT), *REQUIREMENTS],
        check=True,
    )
    stamp.write_text(wanted)
    return python


def test_the_django_tests_pass_on_django_6(tmp_path: Path) -> None:
    interpreter = newer_python()
    if interpreter is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Python >= 3.12 to run Django 6's tests (set LANNER_PYTHON312)")
        pytest.skip("no Python >= 3.12 here (set LANNER_PYTHON312)")
    python = venv_python(interpreter)
    version = subprocess.run(
        [str(python), "-c", "import django, django.tasks; print(django.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(version.stdout.split(".")[0]) >= 6
    run = subprocess.run(
        [str(python), "-m", "pytest", "tests/with_django", "-q", "-p", "no:cacheprovider",
         "-m", "not benchmark", "--basetemp", str(tmp_path / "django6")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]
