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


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out |= {node.module or ""} | {f"{node.module}.{a.name}" if node.module else a.name for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_the_front_ends_import_neither_each_other_nor_each_others_pieces():
    cli, plugin = _imports(PACKAGE / "cli.py"), _imports(PACKAGE / "pytest_plugin.py")
    assert not any("pytest_plugin" in m for m in cli) and not any("cli" in m.split(".") for m in plugin)
    assert "pytest" not in cli


def test_every_option_reads_the_same_in_the_cli_and_in_pytest():
    """One table (plt_bench.options): the CLI's run and pytest's measurement mode take the same
    options with the same help text; only --capture is --captures in pytest, which owns --capture."""
    import argparse

    from plt_bench import cli, options, pytest_plugin
    run = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    cli_help = {a.option_strings[0]: a.help for a in run._actions if a.option_strings and a.dest != "help"}

    class Group:
        def __init__(self):
            self.seen = {}

        def addoption(self, flag, **kw):
            self.seen[flag] = kw["help"]

    class Parser:
        group = Group()

        def getgroup(self, *a):
            return self.group

    pytest_plugin.pytest_addoption(Parser())
    seen = Parser.group.seen
    for key in pytest_plugin.KEYS:
        if key == "campaign":  # the CLI's positional CAMPAIGN
            continue
        flag = options.option(key).cli_flag
        assert flag in cli_help, flag
        assert seen[options.display(key, pytest=True)] == cli_help[flag], key
    assert set(seen) - {options.display(k, pytest=True) for k in pytest_plugin.KEYS} == set()


def _package_imports(path: Path) -> set[str]:
    """Every plt_bench module a file imports, as dotted names inside the package (relative imports
    resolved, lazy ones inside functions included)."""
    parts = ("plt_bench", *path.relative_to(PACKAGE).with_suffix("").parts)
    package = parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(list(package[:len(package) - (node.level - 1)]) + ([node.module] if node.module else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("plt_bench"):
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("plt_bench")}
    return out


# (the modules that may not, what they may not import): a campaign's life does not reach up into the
# analysis of its results, the analysis reads stores, not the link that made them, and the browser
# and server seams reach up into nothing that drives them
UPWARD = [(("options", "session", "campaign"), "plt_bench.analysis"),
          (("analysis",), "plt_bench.link"),
          # the seams sit below the testbed: a browser or a server knows nothing of who drives it
          *[(("browsers", "servers"), f"plt_bench.{up}") for up in ("testbed", "runner", "session", "campaign",
                                                                    "analysis", "link", "browser_worker")]]


def test_no_module_imports_upward():
    found = []
    for modules, banned in UPWARD:
        for name in modules:
            paths = sorted((PACKAGE / name).rglob("*.py")) if (PACKAGE / name).is_dir() else [PACKAGE / f"{name}.py"]
            for path in paths:
                found += [f"{path.relative_to(PACKAGE)} imports {m}" for m in _package_imports(path)
                          if m == banned or m.startswith(banned + ".")]
    assert not found, found
