"""Every relative import in the package resolves, the lazy ones inside functions included (a linter
does not check those: a module moved by a restructuring would fail only when that path runs)."""
import ast
import importlib
from pathlib import Path

import plt_bench

PACKAGE = Path(plt_bench.__file__).parent


def test_every_relative_import_resolves():
    unresolved = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("plt_bench", *path.relative_to(PACKAGE).with_suffix("").parts)
        package = parts[:-1]  # a module's package; for __init__.py, the package itself
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = list(package[:len(package) - (node.level - 1)])
            target = ".".join(base + ([node.module] if node.module else []))
            try:
                module = importlib.import_module(target)
            except ImportError as e:
                unresolved.append(f"{path.name}:{node.lineno}: {target} ({e})")
                continue
            for alias in node.names:
                if not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{target}.{alias.name}")
                    except ImportError:
                        unresolved.append(f"{path.name}:{node.lineno}: {target}.{alias.name}")
    assert not unresolved, unresolved
