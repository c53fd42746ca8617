"""The built site's landing page, in a real headless browser (chromium): its pictures load
and render, the theme's layout holds (sidebar left of the article, nothing wider than the
window, the theme's font), and a screenshot is a page, not a blank. Two controls break the
site on purpose (a picture deleted, the theme's stylesheet deleted) and check that the
same checks catch it, so the test can fail.

Then every page at a desktop's width (1280 px) and a phone's (390 px): no code block wider
than its box (cut off on the right, or hidden behind a sideways scroll), nothing wider than
the window, and every picture rendered wide enough to read (at least its natural width or
MIN_PICTURE px, whichever is smaller). Its control deletes the site's own stylesheet
(docs/_static/site/tensorplug.css, which wraps code and keeps pictures readable on a phone).

.ci/run installs chromium when it is missing; without it the test skips, saying so.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WIDTH, HEIGHT = 1280, 1000

# Run on the window's load event (images loaded by then): what the checks need, as JSON in
# a <pre> that --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", () => {
  const box = (el) => el ? el.getBoundingClientRect().toJSON() : null;
  const result = {
    images: [...document.images].map((i) => ({src: i.getAttribute("src"), loaded: i.complete && i.naturalWidth > 0,
                                            width: i.getBoundingClientRect().width})),
    sidebar: box(document.querySelector(".sidebar-drawer")),
    article: box(document.querySelector("article")),
    h1: box(document.querySelector("h1")),
    scrollWidth: document.documentElement.scrollWidth,
    font: getComputedStyle(document.body).fontFamily,
  };
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
});
</script>"""


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium not installed (apt-get install chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("sphinx", reason="sphinx not installed (pip install '.[docs]')")
    pytest.importorskip("myst_parser", reason="myst-parser not installed (pip install '.[docs]')")
    pytest.importorskip("furo", reason="furo, the site's theme, not installed (pip install '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-d", str(out / "doctrees"),
                             str(ROOT / "docs"), str(out / "html")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return out / "html"


def _chromium(browser: str, profile: Path, *args: str, width: int = WIDTH) -> subprocess.CompletedProcess:
    # Its own profile directory under tmp: nothing written to the user's home.
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={profile}", f"--window-size={width},{HEIGHT}",
                           "--virtual-time-budget=10000", *args], capture_output=True, text=True, timeout=120)


def probe(site: Path, tmp_path: Path) -> dict:
    """The landing page's facts as the browser lays it out."""
    page = site / "index_probe.html"
    page.write_text(site.joinpath("index.html").read_text().replace("</body>", PROBE + "</body>"))
    done = _chromium(_browser(), tmp_path / "profile", "--allow-file-access-from-files", "--dump-dom", page.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, f"the probe did not run; chromium said:\n{done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def layout_problems(facts: dict) -> list[str]:
    """What is wrong with the landing page, in words; empty when nothing is."""
    problems = []
    by_name = {Path(i["src"]).name: i for i in facts["images"]}
    for name in ("call_flow.svg", "fused_decode.png"):
        image = by_name.get(name)
        if image is None:
            problems.append(f"{name}: not on the page")
        elif not image["loaded"]:
            problems.append(f"{name}: did not load")
        elif image["width"] < 300:
            problems.append(f"{name}: rendered {image['width']:.0f} px wide")
    side, article = facts["sidebar"], facts["article"]
    if side is None or article is None:
        problems.append("no sidebar or no article")
    elif not (side["width"] >= 150 and side["x"] + side["width"] <= article["x"] + 1 and article["width"] >= 600):
        problems.append(f"sidebar {side} is not a column left of the article {article}")
    if facts["scrollWidth"] > WIDTH:
        problems.append(f"the page is {facts['scrollWidth']} px wide in a {WIDTH} px window")
    if "Times" in facts["font"] or facts["font"].strip('"') == "serif":
        problems.append(f"the body's font is the browser's default ({facts['font']}): the theme's CSS did not apply")
    if facts["h1"] is None or facts["h1"]["y"] > 200:
        problems.append(f"the title is not at the top: {facts['h1']}")
    return problems


def test_landing_page_renders_with_its_pictures_and_layout(site, tmp_path):
    assert layout_problems(probe(site, tmp_path)) == []

    shot = tmp_path / "landing.png"
    done = _chromium(_browser(), tmp_path / "profile", f"--screenshot={shot}", (site / "index.html").as_uri())
    assert shot.is_file(), done.stderr[-2000:]
    image = pytest.importorskip("PIL.Image", reason="Pillow not installed (it comes with matplotlib, the bench "
                                                    "extra)").open(shot)
    assert image.size == (WIDTH, HEIGHT)
    # A page of text, a diagram and a plot has many colours; a blank or error page has few.
    colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert len(colours) > 200, f"{len(colours)} colours: the screenshot is (nearly) blank"


def test_the_checks_catch_a_missing_picture_and_a_missing_theme(site, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    (broken / "_images" / "call_flow.svg").unlink()
    assert layout_problems(probe(broken, tmp_path)) == ["call_flow.svg: did not load"]

    for css in (broken / "_static" / "styles").glob("furo*.css"):
        css.unlink()
    problems = layout_problems(probe(broken, tmp_path))
    assert any(p.startswith("sidebar ") or p.startswith("no sidebar") for p in problems), problems


# ---- every page at desktop and phone width ----------------------------------------------
PHONE = 390
MIN_PICTURE = 560
# The code blocks and pictures of a page as laid out: a <pre> whose content is wider than its
# box, each picture's rendered and natural width, the page's width against the window's.
OVERFLOW_PROBE = """<script>
window.addEventListener("load", () => {
  const result = {
    window: window.innerWidth,
    page: document.documentElement.scrollWidth,
    pres: [...document.querySelectorAll("article pre")].filter((p) => p.scrollWidth > p.clientWidth + 1)
      .map((p) => ({text: p.textContent.split("\\n").find((l) => l.length > 40) || p.textContent.slice(0, 60),
                    scroll: p.scrollWidth, client: p.clientWidth})),
    images: [...document.querySelectorAll("article img")].map((i) => ({src: i.getAttribute("src"),
      width: i.getBoundingClientRect().width, natural: i.naturalWidth})),
  };
  window.parent.postMessage(JSON.stringify(result), "*");
});
</script>"""
# Headless chromium's window is at least 500 px wide, so the page is laid out in a frame of
# the width asked for (its media queries see the frame's width); the frame posts its facts
# to this page, which writes them where --dump-dom prints them.
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:{height}px;border:0"></iframe>
<script>
window.addEventListener("message", (event) => {{
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = event.data;
  document.body.appendChild(pre);
}});
</script></body></html>"""


def overflow_probe(site: Path, page: str, width: int, profile: Path) -> dict:
    probed = site / f"{Path(page).stem}_overflow_probe.html"
    probed.write_text(site.joinpath(page).read_text().replace("</body>", OVERFLOW_PROBE + "</body>"))
    frame = site / f"{Path(page).stem}_overflow_frame_probe.html"
    frame.write_text(FRAME.format(src=probed.name, width=width, height=HEIGHT))
    done = _chromium(_browser(), profile, "--allow-file-access-from-files", "--dump-dom", frame.as_uri(),
                     width=max(width, 500) + 20)
    found = re.search(r'<pre id="probe"[^>]*>(.*?)</pre>', done.stdout, re.S)
    assert found, f"the probe did not run on {page} at {width} px; chromium said:\n{done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def overflow_problems(facts: dict, page: str, width: int) -> list[str]:
    """What does not fit on ``page`` at ``width``, in words; empty when everything does."""
    problems = []
    for pre in facts["pres"]:
        problems.append(f"{page} at {width} px: code wider than its box ({pre['scroll']} > {pre['client']} px): "
                        f"{pre['text'].strip()[:60]!r}")
    if facts["page"] > facts["window"]:
        problems.append(f"{page} at {width} px: the page is {facts['page']} px wide in a {facts['window']} px window")
    for image in facts["images"]:
        if image["natural"] and image["width"] < min(image["natural"], MIN_PICTURE) - 1:
            problems.append(f"{page} at {width} px: {Path(image['src']).name} rendered {image['width']:.0f} px wide "
                            f"(natural {image['natural']} px): too small to read")
    return problems


def _pages(site: Path) -> list[str]:
    skip = {"genindex.html", "search.html", "py-modindex.html"}
    return sorted(p.name for p in site.glob("*.html") if p.name not in skip and "_probe" not in p.name)


@pytest.mark.parametrize("width", [WIDTH, PHONE], ids=["desktop", "phone"])
def test_every_page_fits_its_window_with_readable_code_and_pictures(site, tmp_path, width):
    problems = []
    for page in _pages(site):
        problems += overflow_problems(overflow_probe(site, page, width, tmp_path / "profile"), page, width)
    assert problems == []


def test_the_phone_check_catches_cut_off_code_and_shrunk_pictures(site, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(site, broken)
    (broken / "_static" / "tensorplug.css").unlink()
    problems = []
    for page in ("index.html", "fused_kernels.html"):
        problems += overflow_problems(overflow_probe(broken, page, PHONE, tmp_path / "profile"), page, PHONE)
    assert any(p.startswith("index.html at 390 px: code wider than its box") for p in problems), problems
    assert any(p.startswith("index.html at 390 px: call_flow.svg rendered") for p in problems), problems
    assert any(p.startswith("fused_kernels.html at 390 px: fused_kernels.png rendered") for p in problems), problems
