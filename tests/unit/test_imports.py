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

        def addoption(self, flag, *aliases, **kw):
            self.seen[flag] = kw["help"]
            self.aliases = {**getattr(self, "aliases", {}), **{a: flag for a in aliases}}

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
    # a renamed option's old flag is taken by both, as the same option (--server for --server-machine, --serve
    # for --folder)
    old = {a.option_strings[1]: a.option_strings[0] for a in run._actions if len(a.option_strings) > 1
           and not a.option_strings[1].startswith("--no-")}
    assert old.get("--server") == "--server-machine" and old.get("--serve") == "--folder"
    assert Parser.group.aliases == {"--server": "--server-machine", "--serve": "--folder"}


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
# analysis of its results, the analysis reads stores, not the link that made them, and the browser,
# server and page seams reach up into nothing that drives them
UPWARD = [(("options", "session", "campaign"), "plt_bench.analysis"),
          (("analysis",), "plt_bench.link"),
          # the seams sit below the testbed: a browser, a server or a page knows nothing of who drives it
          *[(("browsers", "servers", "pages"), f"plt_bench.{up}") for up in ("testbed", "trial", "session", "campaign",
                                                                             "analysis", "recorder")],
          *[(("browsers", "servers"), f"plt_bench.{up}") for up in ("link", "pages.standin", "pages.recording")]]


def test_no_module_imports_upward():
    found = []
    for modules, banned in UPWARD:
        for name in modules:
            paths = sorted((PACKAGE / name).rglob("*.py")) if (PACKAGE / name).is_dir() else [PACKAGE / f"{name}.py"]
            for path in paths:
                found += [f"{path.relative_to(PACKAGE)} imports {m}" for m in _package_imports(path)
                          if m == banned or m.startswith(banned + ".")]
    assert not found, found


def _run_imports(tree: ast.AST) -> list[ast.stmt]:
    """Every import statement that runs (lazy ones inside functions included); those under
    `if TYPE_CHECKING:` are for a type checker alone and never run."""
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
               for stmt in node.body for n in ast.walk(stmt)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skipped]


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("plt_bench", *path.relative_to(PACKAGE).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _graph() -> dict[str, set[str]]:
    """Every module of the package -> the package's modules importing it runs, lazy imports inside
    functions included: `from .pages import Page` is an arrow to pages/__init__.py (which runs its
    kinds), `from . import pages` too, `from .pages import base` to pages/base.py and, as Python runs a
    package's __init__ before any module of it, to pages/__init__.py as well (unless the importer is
    inside that package, whose __init__ is then running already)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        parts = ("plt_bench", *path.relative_to(PACKAGE).with_suffix("").parts)
        package = parts[:-1]
        out = set()
        for node in _run_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("plt_bench")):
                base = ".".join(list(package[:len(package) - (node.level - 1)]) + ([node.module] if node.module else [])) \
                    if node.level else node.module
                # `from X import name`: the module X.name where it is one, else X itself
                out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in modules}
        for target in list(out):  # each package on the way runs its __init__ first
            steps = target.split(".")
            out |= {p for i in range(2, len(steps)) if (p := ".".join(steps[:i])) in modules
                    and not (name == p or name.startswith(p + "."))}
        graph[name] = {m for m in out if m in modules and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted (pure)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_circles_finds_a_loop_and_only_the_loop():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(g) == [["a", "b", "c"]] and circles({"a": {"b"}, "b": set()}) == []


def test_no_module_is_in_an_import_circle():
    """The package's imports, lazy ones included and each package's __init__ counted, make no circle
    (until 2026-11-28 one of 26 modules ran through pages, archive, replay, realpages, record, the
    testbed and the link; until 2026-11-29 one of 16, conditions with link/, pages/ and servers/, which
    a graph without the __init__ arrows did not see)."""
    found = circles(_graph())
    assert not found, found


def test_the_graph_counts_each_package_s_init_and_no_import_for_a_type_checker_alone():
    g = _graph()
    assert "plt_bench.link" in g["plt_bench.store"]  # `from .link import aqm` runs link/__init__.py first
    assert "plt_bench.pages" not in g["plt_bench.pages.generated"]  # inside pages/, its __init__ is running
    assert "plt_bench.pages" not in g["plt_bench.conditions"]  # its Page under `if TYPE_CHECKING:` alone
    tree = ast.parse("import typing\nif typing.TYPE_CHECKING:\n    import a\nimport b\ndef f():\n    import c\n")
    assert [n.names[0].name for n in _run_imports(tree)] == ["typing", "b", "c"]


# The model: plain records and their arithmetic, the units they are given in. It imports no seam (a part:
# a browser, a server, a page kind, the link, the visitor's device, the name server), not even by a
# module between: each part parses its own option text, and the names are checked where the campaign
# is built (plt_bench.axes, campaign). Until 2026-11-29 conditions imported four of them.
MODEL = ("conditions", "records", "units", "protocols", "traces", "errors", "precision")
SEAMS = ("browsers", "servers", "pages", "link", "device", "dns")


def test_the_model_imports_no_seam():
    g = _graph()
    found = []
    for m in MODEL:
        seen, todo = set(), [f"plt_bench.{m}"]
        while todo:  # everything importing it runs
            for x in g.get(todo.pop(), ()):
                if x not in seen:
                    seen.add(x)
                    todo.append(x)
        found += [f"{m} runs {x}" for x in sorted(seen) if x.split(".")[1] in SEAMS]
    assert not found, found


def test_a_page_kind_imports_the_base_and_the_shared_modules_never_another_kind():
    """pages/: the base imports no other module of the package; the shared modules no kind; each kind
    (a module that registers one) the base and the shared modules alone. Adding a kind is its module,
    its line in pages/__init__.py and its tests."""
    from plt_bench import pages
    kinds = {f"plt_bench.pages.{k.__class__.__module__.rsplit('.', 1)[1]}" for k in pages.KINDS}
    assert len(kinds) == len(pages.KINDS), kinds  # one module a kind
    graph = _graph()
    inside = {m: {x for x in out if x.startswith("plt_bench.pages")} for m, out in graph.items()
              if m.startswith("plt_bench.pages.")}
    shared = set(inside) - kinds
    assert inside["plt_bench.pages.base"] == set(), inside["plt_bench.pages.base"]
    assert {m: out & kinds for m, out in inside.items() if m in shared and out & kinds} == {}
    assert {m: out - shared for m, out in inside.items() if m in kinds and out - shared} == {}
    text = (PACKAGE / "pages" / "base.py").read_text()
    assert "register(" not in text.split("def register", 1)[1].split("\n\n\n", 1)[1]  # the base registers no kind


def test_the_reference_layout_names_every_module_of_the_package():
    """docs/reference.md's layout names each module (`name`) and each sub-package (`name/`): a module
    added without a word there fails here (a round ago it named 28 of 43)."""
    import re
    text = (PACKAGE.parents[1] / "docs" / "reference.md").read_text()
    layout = text.split("## Layout", 1)[1].split("\n### ", 1)[0]
    named = set(re.findall(r"`([a-z_]+)/?`", layout))
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts or path.stem == "__init__" and len(rel.parts) == 1:
            continue
        name = rel.parts[0] if path.stem == "__init__" else path.stem
        if name not in named:
            missing.append(str(rel))
    assert not missing, missing


def test_the_reference_pages_carry_no_dated_measurement():
    """Dated measurements live on the results page (docs/results.md, with the command that reproduces
    each, and its archive, docs/results-archive.md); the README and the reference pages describe what
    is measured and point there."""
    import re
    docs = PACKAGE.parents[1] / "docs"
    dated = [f"{p.name}:{n}: {line.strip()[:80]}" for p in sorted(docs.glob("*.md"))
             if p.name not in ("results.md", "results-archive.md")
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\b20\d\d-\d\d-\d\d\b", line)]
    readme = PACKAGE.parents[1] / "README.md"
    dated += [f"README.md:{n}" for n, line in enumerate(readme.read_text().splitlines(), 1)
              if re.search(r"\b20\d\d-\d\d-\d\d\b", line)]
    assert not dated, dated


def test_the_testbed_is_a_composition_built_from_one_settings_record():
    """Testbed takes one record (testbed.Setup), not a keyword per setting (it took 17 until
    2026-11-29, threaded by hand in two places with different sets: browser_sandbox reached one), and
    stays a composition of its parts: under 300 lines (it was 595, every new axis a set_X on it), the
    browser's request built by the browser seam (browsers.visit), the visitor by device.visitor. The
    browser worker and the testbed import neither the other (test_no_module_imports_upward: the
    browsers seam imports no testbed, and the testbed's modules no worker internals but its pipe)."""
    import inspect

    from plt_bench.testbed import RemoteTestbed, Setup, Testbed
    assert list(inspect.signature(Testbed.__init__).parameters) == ["self", "setup"]
    assert list(inspect.signature(RemoteTestbed.__init__).parameters)[:2] == ["self", "setup"]
    assert inspect.signature(Testbed.__init__).parameters["setup"].annotation in (Setup, "Setup")
    lines = len(inspect.getsource(Testbed).splitlines())
    assert lines < 300, lines
    graph = _graph()
    seen, todo = set(), ["plt_bench.browsers.worker", "plt_bench.browsers.pipe"]
    while todo:  # everything the worker and its pipe run, through any module between
        for m in graph[todo.pop()]:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    assert not {m for m in seen if m.startswith(("plt_bench.testbed", "plt_bench.trial"))}, seen


def test_the_results_page_has_an_index_by_topic_that_names_every_entry_and_its_archive_says_what_superseded_each():
    """docs/results.md: its index by topic links every entry of the page, each link to a heading that is
    there (GitHub's anchors); docs/results-archive.md holds the entries later ones superseded, each
    naming the entry on the results page that did."""
    import re
    docs = PACKAGE.parents[1] / "docs"

    def anchors(text: str) -> dict[str, str]:
        return {re.sub(r"[^\w\- ]", "", h.lower().replace("`", "")).replace(" ", "-"): h
                for h in re.findall(r"^## (.+)$", text, re.M)}
    page = (docs / "results.md").read_text()
    index = page.split("## By topic", 1)[1].split("\n## ", 1)[0]
    here = anchors(page)
    linked = re.findall(r"\]\(#([^)]+)\)", index)
    assert set(linked) <= set(here), set(linked) - set(here)
    assert set(here) - set(linked) == {"by-topic"}, set(here) - set(linked)
    archive = (docs / "results-archive.md").read_text()
    for entry in archive.split("\n## ")[1:]:
        sup = re.findall(r"Superseded by \[[^\]]+\]\(results\.md#([^)]+)\)", entry)
        assert sup and sup[0] in here, entry.splitlines()[0]


def test_no_file_is_over_600_lines_without_a_stated_reason():
    """docs/reference.md's 'Files over 600 lines' names each module that is, with why it is one file
    (there were 6 on 2026-11-26 and 14 on 2026-11-29); a file that grows past 600 without a word there
    fails here, and so does a word for a file that is no longer over."""
    import re
    text = (PACKAGE.parents[1] / "docs" / "reference.md").read_text()
    listed = set(re.findall(r"^- `([\w/]+\.py)`:", text.split("### Files over 600 lines", 1)[1].split("\n### ", 1)[0], re.M))
    over = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if len(p.read_text().splitlines()) > 600}
    assert over == listed, (sorted(over - listed), sorted(listed - over))


# The package's own modules imported inside functions, outside the modules whose docstring says why
# ("Imports inside functions: ..."): 334 in all on 2026-11-29 before the model and the testbed were
# mended, 243 after (campaign.py's 18 and session.py's 20 moved to their tops), of which cli.py, cluster.py and
# browsers/worker.py state theirs (start-up time, an optional dependency): 162 left unstated. They
# may only fall: an import is at the top of its module unless the module says why.
LAZY_UNSTATED_AT_MOST = 162


def test_imports_inside_functions_are_those_with_a_stated_reason_or_fewer_than_before():
    lazy = 0
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        if "Imports inside functions" in (ast.get_docstring(tree) or ""):
            continue
        seen = set()
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                seen |= {id(n) for n in ast.walk(f) if isinstance(n, ast.ImportFrom)
                         and (n.level or (n.module or "").startswith("plt_bench"))}
        lazy += len(seen)
    assert lazy <= LAZY_UNSTATED_AT_MOST, lazy
