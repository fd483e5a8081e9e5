"""Shared fixtures. Integration tests need root: they build real namespaces, Caddy and Chromium."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "plt_bench.cli"]


def run_cli(*args, timeout=300, **kw):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kw)


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: run the suite with scripts/test as root (CI does)")
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(skip)


def pytest_sessionfinish(session, exitstatus):
    """After the whole suite nothing of ours may remain: fail the run if something does."""
    if os.geteuid() != 0 or session.config.option.collectonly:
        return
    from plt_bench import topology
    left = topology.leftovers()
    if any(left.values()):
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"LEFTOVER testbed state after the suite: {left}", red=True)
        session.exitstatus = 1
