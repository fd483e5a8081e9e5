"""No command of the package is built through a shell."""
import ast
import os
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "plt-bench" / "plt_bench"


def offenders(files) -> list[str]:
    out = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "shell":
                out.append(f"{f.relative_to(PKG)}:{node.value.lineno} shell=")
            if isinstance(node, ast.Attribute) and node.attr in ("system", "popen") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                out.append(f"{f.relative_to(PKG)}:{node.lineno} os.{node.attr}")
    return out


def test_no_shell_true_and_no_os_system_anywhere_in_the_package():
    files = sorted(PKG.rglob("*.py"))
    # every module of every subpackage (link/ runs tc, iptables and linkem): the scan once skipped them
    every = sorted(Path(d) / f for d, _, names in os.walk(PKG) for f in names if f.endswith(".py"))
    assert files == every and PKG / "link" / "commands.py" in files and PKG / "link" / "linkem.py" in files
    assert offenders(files) == []


def test_the_scan_finds_a_shell_in_a_subpackage(tmp_path):
    """The check itself: a shell=True in a nested module is reported."""
    global PKG
    nested = tmp_path / "link"
    nested.mkdir()
    (nested / "x.py").write_text("import subprocess, os\nsubprocess.run('tc', shell=True)\nos.system('ip')\n")
    old, PKG = PKG, tmp_path
    try:
        assert offenders(sorted(tmp_path.rglob("*.py"))) == ["link/x.py:2 shell=", "link/x.py:3 os.system"]
    finally:
        PKG = old
