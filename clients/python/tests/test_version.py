"""The client's version is the server's: the dueq binary the tests run, and, in a checkout of
the repository, the Cargo workspace's."""

import re
import subprocess

import pytest

import dueq
from conftest import WORKSPACE, dueq_binary


def test_version_is_the_servers() -> None:
    out = subprocess.run(
        [str(dueq_binary()), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["dueq", dueq.__version__]


def test_version_is_the_workspace_version() -> None:
    cargo = WORKSPACE / "Cargo.toml"
    if not (cargo.exists() and (WORKSPACE / "clients" / "python").is_dir()):
        pytest.skip("not in a checkout of the dueq repository (an unpacked sdist)")
    m = re.search(r'^\[workspace\.package\][^\[]*?^version = "([^"]+)"', cargo.read_text(), re.M | re.S)
    assert m, "no [workspace.package] version in Cargo.toml"
    assert dueq.__version__ == m.group(1)
