"""The hostile and isolation tests again, run by an ordinary user (as the pipeline runs on an HTCondor node).

Needs root (to create the user) and useradd/userdel, setpriv and unshare; skipped otherwise. When
the interpreter lies under a directory an ordinary user cannot enter (pyenv under /root, 0700), the
run happens in a private mount namespace where that directory is a world-readable tmpfs holding only
a bind mount of the interpreter's directory; nothing outside the test's own process tree changes.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITES = [
    "tests/sandbox/test_hostile.py",
    "tests/sandbox/test_memory_isolation.py",
    "tests/sandbox/test_correct_programs.py",
    "tests/sandbox/test_workers.py",
]
TOOLS = ("useradd", "userdel", "setpriv", "unshare")


def _closed_ancestor(path: str) -> tuple[str, str] | None:
    """(directory others cannot enter, its child on the way to ``path``), or None if all can be entered."""
    parts = Path(os.path.realpath(path)).parts
    for depth in range(1, len(parts) - 1):
        directory = os.path.join(*parts[: depth + 1])
        if not os.stat(directory).st_mode & stat.S_IXOTH:
            return directory, os.path.join(directory, parts[depth + 1])
    return None


@pytest.fixture(scope="module")
def ordinary_user():
    if os.geteuid() != 0:
        pytest.skip("creating a user needs root; this run is already unprivileged")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not available")
    name = f"arcsbx{secrets.token_hex(4)}"
    created = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if created.returncode != 0:
        pytest.skip(f"useradd failed: {created.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def test_hostile_and_isolation_tests_pass_as_an_ordinary_user(ordinary_user):
    basetemp = tempfile.mkdtemp(prefix="arcsbx-")
    shutil.chown(basetemp, ordinary_user, ordinary_user)
    mounts = []
    for path in {sys.executable, sys.prefix, sys.base_prefix, str(REPO)}:
        closed = _closed_ancestor(path)
        if closed and closed not in mounts:
            mounts.append(closed)
    script = ["set -e"]
    for index, (directory, child) in enumerate(mounts):
        hold = f"{basetemp}.hold{index}"
        script += [
            f"mkdir -p {hold}",
            f"mount --bind {shlex.quote(child)} {hold}",
            f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(directory)}",
            f"mkdir -p {shlex.quote(child)}",
            f"mount --bind {hold} {shlex.quote(child)}",
        ]
    pytest_command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-x",
        f"--basetemp={basetemp}/t",
        "-o",
        "log_cli=true",
        "--log-cli-level=INFO",
        *SUITES,
    ]
    script.append(
        f"cd {shlex.quote(str(REPO))} && exec setpriv --reuid {ordinary_user} --regid {ordinary_user} "
        "--clear-groups --inh-caps=-all env -i PATH=/usr/bin:/bin HOME=/tmp PYTHONDONTWRITEBYTECODE=1 "
        + shlex.join(pytest_command)
    )
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)],
            capture_output=True,
            text=True,
            timeout=560,
        )
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)
        for index in range(len(mounts)):
            shutil.rmtree(f"{basetemp}.hold{index}", ignore_errors=True)
    output = done.stdout + done.stderr
    if done.returncode != 0 and "unshare failed" in output:
        pytest.skip(f"no private mount namespace here: {output.strip()[-300:]}")
    assert done.returncode == 0, output[-6000:]
    assert "credentials: unprivileged uid" in output  # the layers it ran under are logged at start
    passed = re.search(r"(\d+) passed", output)
    assert passed and int(passed.group(1)) >= 100 and " failed" not in output, output[-3000:]
