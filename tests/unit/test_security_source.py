"""No command of the package is built through a shell."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "plt-bench" / "plt_bench"


def test_no_shell_true_and_no_os_system_anywhere_in_the_package():
    offenders = []
    for f in sorted(PKG.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "shell":
                offenders.append(f"{f.name}:{node.value.lineno} shell=")
            if isinstance(node, ast.Attribute) and node.attr in ("system", "popen") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                offenders.append(f"{f.name}:{node.lineno} os.{node.attr}")
    assert len(list(PKG.glob("*.py"))) > 10 and offenders == []
