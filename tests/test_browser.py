"""The pages users open, opened in a real browser: the main job's report.html, the sweep report and the built
documentation site load in headless Chromium (Debian's ``chromium``, driven by Playwright) with no console error,
every image decoded, every in-page link and every link between the site's pages resolving, and no line running off
the page at a laptop's width. Screenshots of each first screen go to ``artifacts/browser/``.

Skipped, with the reason, where Chromium or Playwright is missing (``.ci/run`` installs Chromium first)."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from helpers import SMALL_JOBS
from mlm_dynamics.cli import main

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "browser"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}

playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (the test extra)")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).is_file(),
                                reason=f"no Chromium at {CHROMIUM}: `apt-get install chromium` (.ci/run does)")

# Each page is checked with these, in the page: images that failed, fragment links without a target, overflow.
BROKEN_IMAGES = "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt || i.src)"
MISSING_TARGETS = """Array.from(document.querySelectorAll('a[href^="#"]')).map(a => a.getAttribute('href'))
    .filter(h => h.length > 1 && !document.getElementById(decodeURIComponent(h.slice(1))))"""
OVERFLOW = """[document.documentElement.scrollWidth - window.innerWidth,
    Array.from(document.querySelectorAll('body > pre, .md-content pre > code')).filter(
        p => p.scrollWidth > p.clientWidth + 1 && getComputedStyle(p).overflowX === 'visible').length]"""
LINKS = "Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def open_checked(browser, url: str, screenshot: str) -> object:
    """Load ``url``; assert no console error or page error, every image decoded, every fragment link resolving and
    no horizontal overflow; save a screenshot of the first screen. Returns the page (for further checks)."""
    page = browser.new_page(viewport=VIEWPORT)
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{screenshot}.png"))
    assert not errors, (url, errors)
    assert page.evaluate(BROKEN_IMAGES) == [], url
    assert page.evaluate(MISSING_TARGETS) == [], url
    overflow, wide_blocks = page.evaluate(OVERFLOW)
    assert overflow <= 0 and wide_blocks == 0, (url, overflow, wide_blocks)
    return page


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """The run job's and the sweep's reports, from their smallest presets (a few seconds each), and the mixing
    history of a short fit logged to CSV."""
    from test_callbacks import fit

    out = tmp_path_factory.mktemp("reports")
    for job in ("run", "sweep"):
        preset, overrides = SMALL_JOBS[job]
        sets = [item for override in overrides for item in ("--set", override)]
        assert main([job, "--config", preset, "--out", str(out / job), "--quiet", *sets]) == 0
    fit(out / "fit", max_steps=4)
    assert main(["report", str(out / "fit" / "csv"), "--out", str(out / "history")]) == 0
    preset, overrides = SMALL_JOBS["sweep"]
    sets = [item for override in [*overrides, "grid.max_steps=10"] for item in ("--set", override)]
    assert main(["sweep", "--config", preset, "--out", str(out / "short-sweep"), "--quiet", *sets]) == 0
    assert main(["compare", str(out / "sweep"), str(out / "short-sweep"), "--out", str(out / "compare")]) == 0
    return out


@pytest.mark.parametrize("job", ["run", "sweep", "history", "compare"])
def test_job_reports_render_cleanly_and_lead_with_what_the_run_found(browser, reports, job):
    page = open_checked(browser, (reports / job / "report.html").as_uri(), f"{job}-report")
    headings = page.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
    assert headings[0].startswith(("What the run found", "What the runs found")), headings  # the verdicts first
    toc = page.evaluate("Array.from(document.querySelectorAll('nav.toc a')).map(a => a.textContent)")
    assert toc == headings, (toc, headings)  # the contents list every section, in order
    assert page.evaluate("document.images.length") >= 2
    # the first screen names where the run comes from and opens the verdicts
    provenance = page.evaluate("[document.querySelector('p.provenance').textContent, "
                               "document.querySelector('p.provenance').getBoundingClientRect().bottom]")
    assert provenance[1] < VIEWPORT["height"], provenance
    verdicts_top = page.evaluate("document.querySelector('h2').getBoundingClientRect().top")
    assert verdicts_top < VIEWPORT["height"] - 100, verdicts_top
    assert "mlm dynamics " in provenance[0] and " date 20" in provenance[0], provenance  # version and date
    assert "Draws" in headings, headings  # every report shows what the chains drew, as text
    marked = page.evaluate("document.querySelectorAll('td mark').length")
    assert marked > 0, job  # ... with the tokens that changed marked
    if job == "sweep":  # the pairs' distance over steps
        assert page.evaluate("Array.from(document.images).some(i => i.alt.startsWith(\"each pair's distance\"))")
    if job == "run":
        assert {"Draws", "Traces"} <= set(headings), headings  # the chains themselves, as text and as traces
        assert headings[1] == "Key figures"
        first_screen = page.evaluate("document.querySelector('h2:nth-of-type(2)').getBoundingClientRect().top")
        assert first_screen < VIEWPORT["height"] * 2, first_screen  # the key figures are near the top
    page.close()


# code blocks whose text is wider than the block: clipped, readable only by scrolling sideways
CLIPPED_CODE = """Array.from(document.querySelectorAll('pre > code')).filter(c => c.scrollWidth > c.clientWidth + 1)
    .map(c => c.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''))"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The documentation site, built strictly (as CI does) and served over HTTP as it would be published."""
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def test_documentation_site_pages_render_and_every_link_resolves(browser, site):
    folder, base = site
    pages = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*.html") if path.name != "404.html")
    assert {"index.html", "getting-started.html", "reference/metric-keys.html", "reference/config.html",
            "reference/cli.html", "results.html", "changelog.html"} <= set(pages)
    targets: dict[str, set[str]] = {}  # page -> the ids in it
    links: list[tuple[str, str]] = []
    for name in pages:
        page = open_checked(browser, urljoin(base, name), "site-" + name.replace("/", "-").removesuffix(".html"))
        targets[name] = set(page.evaluate("Array.from(document.querySelectorAll('[id]')).map(e => e.id)"))
        clipped = page.evaluate(CLIPPED_CODE)
        assert not clipped, f"{name}: code blocks wider than the column at 1280 px (first line shown): {clipped}"
        links += [(name, href) for href in page.evaluate(LINKS) if href.startswith(base)]
        page.close()
    for source, href in links:
        parsed = urlparse(href)
        path = unquote(parsed.path).lstrip("/") or "index.html"
        if path.endswith("/"):
            path += "index.html"
        assert (folder / path).is_file(), f"{source} links to {href}, which the site does not have"
        if parsed.fragment and path in targets:
            assert unquote(parsed.fragment) in targets[path], f"{source} links to {href}: no such anchor"
    remote = [tag for tag in (folder / "index.html").read_text().split("<")
              if tag.startswith(("link", "script")) and "https://" in tag]
    assert not remote, remote  # fonts, scripts and styles are all local: the site works offline
