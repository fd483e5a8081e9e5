"""Real pages that no one here wrote, installed by package name (scripts/setup): what the replay is
measured against (bench-replay) and the suite's real test material. Each is served as it is from
its package's files under host names of the reserved .test domain (plt-bench run --folder), and
recorded from there (plt-bench record); no recording of a third-party site is shipped. A campaign
names one as a page, `--size real:NAME`: its recording (sites/real-NAME), made by the first run
that asks for it (recorder.record_real) and replayed as recorded from then on: this kind names
the page, the recording kind replays it.

- swagger: swagger-ui-dist (npm) rendering @readme/oas-examples' petstore.json (npm): a page its
  own JavaScript builds from a JSON document it fetches from a second origin (api.pkg.test). The
  one file of ours is swagger-initializer.js, which names that document (the package's names a
  site on the web). The page also asks validator.swagger.io to check the document: a request for
  a host outside the testbed, which the browser cannot resolve there.
- toolbelt: the HTML documentation of requests-toolbelt (Debian's python-requests-toolbelt-doc,
  Sphinx with the Read the Docs theme): a static page of stylesheets, scripts and fonts.
- The corpus (issue 48; `--size real:*`, the `corpus` preset): documentation of several generators
  from Debian's packages (Sphinx in four themes: jinja, flask, sqlalchemy, pygments, sphinx; MkDocs:
  mkdocs, markdown; Doxygen: eigen, whose menu and search its own scripts draw), pages their own
  scripts draw (mathjax: MathJax typesetting TeX into HTML with its web fonts; pdfjs: pdf.js's viewer
  drawing a PDF of a Debian package; swagger), pages of several origins (swagger's API on a second;
  cdn: Flask's documentation with its files on a second origin and its images on a third). Python's and Rust's
  own documentation are left out: other checks use them. PACKAGES names what setup installs.
"""

from __future__ import annotations

import contextvars
import dataclasses
from pathlib import Path

from .. import cmd
from ..errors import EnvironmentProblem, UsageError
from . import archive
from .base import MIN_PAGE_BYTES, REPLAY_NAME_RE, Page, PageKind, page_url, parse_page, register

PAGES_DIR = cmd.PROJECT_ROOT / ".tools" / "pages"  # npm packages unpacked by scripts/setup
DOC = Path("/usr/share/doc")
JS = Path("/usr/share/javascript")
# The Debian packages the real pages come from (scripts/setup's part pages installs them by name)
PACKAGES = ("python-requests-toolbelt-doc", "python-jinja2-doc", "python-flask-doc", "python-sqlalchemy-doc",
            "python-pygments-doc", "sphinx-doc", "mkdocs-doc", "python-markdown-doc", "libeigen3-doc",
            "libjs-mathjax", "libjs-pdf", "shared-mime-info")
# pdf.js's viewer and a PDF, served as one origin (the viewer opens a file of its own origin only): a
# folder of ours of three links (install()), to Debian's viewer, its build and a package's PDF
PDFJS_LINKS = {"web": JS / "pdf" / "web", "build": JS / "pdf" / "build",
               "spec.pdf": Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf")}
NPM_PACKAGES = {"swagger-ui": ("swagger-ui-dist", "5.35.0"), "oas": ("@readme/oas-examples", "8.2.2")}
# A site whose files a CDN serves: Flask's documentation page with its scripts, style sheets and fonts
# on one more origin and its images on another, as a site deployed behind a CDN names them (the page
# ours: the package's index.html with those references pointed at the other hosts, install()); both
# hosts serve the package's own folder
FLASK = DOC / "python-flask-doc" / "html"
CDN_ORIGINS = {"_static/": page_url("static.pkg.test", "/_static/"), "_images/": page_url("images.pkg.test", "/_images/")}
SWAGGER_INITIALIZER = """window.onload = function() {
  // plt-bench: the API document from the testbed's second origin (the package names one on the web)
  window.ui = SwaggerUIBundle({
    url: "%s",
    dom_id: '#swagger-ui',
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: "StandaloneLayout"
  });
};
""" % page_url("api.pkg.test", "/3.0/json/petstore.json")


@dataclasses.dataclass(frozen=True)
class RealPage:
    name: str
    url: str
    folders: tuple[tuple[str, Path], ...]  # (host, folder): served as they are (--folder)
    what: str

    def missing(self) -> list[Path]:
        return [d for _, d in self.folders if not d.is_dir()]

    @property
    def folder_option(self) -> str:
        return ",".join(f"{h}={d}" for h, d in self.folders)


PAGES = (
    RealPage("swagger", page_url("docs.pkg.test", "/index.html"),
             (("docs.pkg.test", PAGES_DIR / "swagger-ui"), ("api.pkg.test", PAGES_DIR / "oas")),
             "swagger-ui-dist 5.35.0 building an API reference from @readme/oas-examples' petstore.json (fetched "
             "from a second origin)"),
    # one origin each, NAME.pkg.test, serving the package's folder
    *(RealPage(name, page_url(f"{name}.pkg.test", target), ((f"{name}.pkg.test", folder),), what) for name, target, folder, what in (
        ("toolbelt", "/index.html", DOC / "python-requests-toolbelt-doc" / "html",
         "requests-toolbelt's documentation (Debian python-requests-toolbelt-doc: Sphinx, Read the Docs theme)"),
        ("jinja", "/index.html", DOC / "python-jinja2-doc" / "html",
         "Jinja's documentation (Debian python-jinja2-doc: Sphinx, the Pallets theme)"),
        ("flask", "/index.html", DOC / "python-flask-doc" / "html",
         "Flask's documentation (Debian python-flask-doc: Sphinx, the Pallets theme)"),
        ("sqlalchemy", "/index.html", DOC / "python-sqlalchemy-doc" / "html",
         "SQLAlchemy's documentation (Debian python-sqlalchemy-doc: Sphinx, its own zzzeeksphinx theme)"),
        ("pygments", "/index.html", DOC / "python-pygments-doc" / "html",
         "Pygments' documentation (Debian python-pygments-doc: Sphinx, its own theme)"),
        ("sphinx", "/index.html", DOC / "sphinx-doc" / "html",
         "Sphinx's own documentation (Debian sphinx-doc: its sphinx13 theme)"),
        ("mkdocs", "/index.html", DOC / "mkdocs" / "html",
         "MkDocs' documentation (Debian mkdocs-doc: MkDocs, its Bootstrap theme, jQuery)"),
        ("markdown", "/index.html", DOC / "python-markdown-doc" / "docs",
         "Python-Markdown's documentation (Debian python-markdown-doc: MkDocs)"),
        ("eigen", "/index.html", DOC / "libeigen3-dev" / "html",
         "Eigen's reference (Debian libeigen3-doc: Doxygen, its menu and search drawn by its scripts)"),
        ("mathjax", "/test/sample-tex.html", JS / "mathjax",
         "MathJax 2.7 typesetting TeX on its own sample page (Debian libjs-mathjax: its web fonts)"),
        ("pdfjs", "/web/viewer.html?file=/spec.pdf", PAGES_DIR / "pdfjs",
         "pdf.js's viewer (Debian libjs-pdf) drawing the shared-mime-info specification (a PDF of Debian's "
         "shared-mime-info)"))),
    RealPage("cdn", page_url("site.pkg.test", "/index.html"),
             (("site.pkg.test", PAGES_DIR / "cdn"), ("static.pkg.test", FLASK), ("images.pkg.test", FLASK)),
             "Flask's documentation (Debian python-flask-doc) as a site behind a CDN serves it: its scripts, "
             "style sheets and fonts from a second origin, its images from a third"),
)


RECORDING_PREFIX = "real-"  # a real page's recording: sites/real-NAME (--size real:NAME)
# while set: the real pages a campaign names that are not recorded yet, gathered instead of refused,
# so that every other option is checked before anything is recorded (session.spec_from_options)
UNRECORDED: contextvars.ContextVar[set | None] = contextvars.ContextVar("unrecorded", default=None)


class NotRecorded(UsageError):
    """--size real:NAME whose recording this machine has not made yet: a front end that may record
    (session.from_options) records it and reads the campaign again; the others say how."""

    def __init__(self, name: str, option: str = "--size"):
        self.name = name
        super().__init__(f"{option}: real:{name} is not recorded on this machine yet; 'plt-bench run' records it "
                         f"first (as root), or: plt-bench record {by_name(name).url} --name {RECORDING_PREFIX}{name} "
                         + " ".join(f"--folder {h}={d}" for h, d in by_name(name).folders))


def by_name(name: str, option: str = "--size") -> RealPage:
    """One of PAGES by its name; UsageError naming them."""
    for p in PAGES:
        if p.name == name:
            return p
    raise UsageError(f"{option}: real:{name}: no such real page; expected one of "
                     + ", ".join(f"real:{p.name}" for p in PAGES))


def ready() -> list[RealPage]:
    """The real pages, once their packages are installed (scripts/setup); raises naming what is missing."""
    gone = [(p.name, d) for p in PAGES for d in p.missing()]
    if gone:
        raise EnvironmentProblem("the real pages are not installed: " + ", ".join(f"{n} ({d})" for n, d in gone)
                                 + "; run scripts/setup")
    return list(PAGES)


def on_origins(html: str, origins: dict[str, str]) -> str:
    """A page's relative references to its folders (src="_static/..", href="_images/..") pointed at
    the origins that serve them (pure): CDN_ORIGINS, each folder's prefix and the address it is at."""
    for prefix, url in origins.items():
        for attr in ("src", "href"):
            html = html.replace(f'{attr}="{prefix}', f'{attr}="{url}')
    return html


def install() -> None:
    """Write the API page's initializer over the package's (scripts/setup, after unpacking it), link
    pdf.js's viewer and its PDF into one folder, and write the CDN site's page (on_origins)."""
    (PAGES_DIR / "swagger-ui" / "swagger-initializer.js").write_text(SWAGGER_INITIALIZER)
    if (FLASK / "index.html").is_file():
        (PAGES_DIR / "cdn").mkdir(parents=True, exist_ok=True)
        (PAGES_DIR / "cdn" / "index.html").write_text(on_origins((FLASK / "index.html").read_text(), CDN_ORIGINS))
    folder = PAGES_DIR / "pdfjs"
    folder.mkdir(parents=True, exist_ok=True)
    for name, target in PDFJS_LINKS.items():
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)


def expand(text: str) -> str:
    """real:* in a list of pages, as every real page by name (pure): the corpus."""
    return ",".join(",".join(f"real:{p.name}" for p in PAGES) if x.strip().lower() == "real:*" else x
                    for x in text.split(","))


class Real(PageKind):
    """real:NAME: parsed into its recording's page (the recording kind's); it claims no page itself."""

    name = "real"
    item_form = "real:NAME (a real page from a package, by its recording: real:toolbelt)"

    def claims(self, page: Page) -> bool:
        return False

    def parse(self, item: str, option: str) -> Page | None:
        if not item.lower().startswith("real:"):
            return None
        name = item[5:].strip().lower()
        by_name(name, option)
        recording = RECORDING_PREFIX + name
        if not (REPLAY_NAME_RE.fullmatch(recording) and archive.archive_exists(recording)):
            gathering = UNRECORDED.get()
            if gathering is None:
                raise NotRecorded(name, option)
            gathering.add(name)  # the rest of the campaign is checked first; this stands in meanwhile
            return Page(MIN_PAGE_BYTES, replay=recording)
        return parse_page(f"har:{recording}", option)


REAL = register(Real())
