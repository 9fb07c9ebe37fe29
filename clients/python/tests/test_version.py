"""The client's version follows the server's (the Cargo workspace version)."""

import re

import dueq
from conftest import WORKSPACE


def test_version_is_the_workspace_version() -> None:
    cargo = (WORKSPACE / "Cargo.toml").read_text()
    m = re.search(r'^\[workspace\.package\][^\[]*?^version = "([^"]+)"', cargo, re.M | re.S)
    assert m, "no [workspace.package] version in Cargo.toml"
    pyproject = (WORKSPACE / "clients" / "python" / "pyproject.toml").read_text()
    assert f'version = "{m.group(1)}"' in pyproject
    assert dueq.__version__ == m.group(1)
