"""Look at a rendered report the way a reader would: headless Chromium for the HTML, pdftoppm for the PDF pages."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from clustercert.report.render import REPEAT_WORDS  # the report says once what this check counts

# Injected into a temporary copy only (the report itself carries no script): it measures the laid-out page.
PROBE = """<script>
window.addEventListener('load', () => {
  const out = {tables: [], images: [], width: document.documentElement.clientWidth};
  for (const t of document.querySelectorAll('table')) {
    const box = t.parentElement.getBoundingClientRect();
    const r = t.getBoundingClientRect();
    if (r.right > box.right + 1 || t.scrollWidth > t.clientWidth + 1) {
      out.tables.push((t.querySelector('caption') || t).textContent.trim().slice(0, 80));
    }
  }
  for (const img of document.querySelectorAll('img')) {
    if (!img.complete || img.naturalWidth === 0 || !img.alt) out.images.push(img.alt || img.src.slice(0, 40));
  }
  out.count_images = document.querySelectorAll('img').length;
  // a cell taller than a printed page's body (A4 less its margins, in CSS pixels) runs over a page
  out.tall_cells = [];
  for (const c of document.querySelectorAll('td, th')) {
    if (c.getBoundingClientRect().height > PAGE_PX) out.tall_cells.push(c.textContent.trim().slice(0, 80));
  }
  // a table with a header and no row says nothing
  out.empty_tables = [];
  for (const t of document.querySelectorAll('table')) {
    const rows = t.tBodies.length ? [...t.tBodies].reduce((n, b) => n + b.rows.length, 0) : t.rows.length;
    if (rows === 0) out.empty_tables.push((t.querySelector('caption') || t).textContent.trim().slice(0, 80));
  }
  // a sentence said again and again is noise: say it once and refer to it. The prose of each paragraph, list item,
  // table data cell or figure caption without a block inside, as laid out (innerText: a <br> breaks a line), less
  // its labels (headers and captions are not read; a check's title is class "label"), cut into sentences as
  // clustercert.report.render.sentences() cuts a message: after . ; : ! or ? and a space, outside brackets; a
  // sentence of REPEAT_WORDS words or more said more than REPEAT_MAX times fails
  const sentences = (text) => {
    const out = []; let depth = 0, start = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if ('([{'.includes(c)) depth++;
      else if (')]}'.includes(c) && depth > 0) depth--;
      if ('.;:!?'.includes(c) && depth === 0 && i + 1 < text.length && /\\s/.test(text[i + 1])) {
        out.push(text.slice(start, i + 1)); start = i + 1;
      }
    }
    out.push(text.slice(start));
    return out.map((p) => p.replace(/\\s+/g, ' ').trim()).filter(Boolean);
  };
  const seen = new Map();
  for (const el of document.querySelectorAll('p, li, td, figcaption')) {
    if (el.querySelector('p, li, td, table, ul, ol')) continue;
    let prose = el.innerText;
    for (const label of el.querySelectorAll('.label')) prose = prose.replace(label.innerText, '\\n');
    for (const line of prose.split(/\\n+/)) {
      for (const text of sentences(line)) {
        if (text.split(' ').length >= REPEAT_WORDS) seen.set(text, (seen.get(text) || 0) + 1);
      }
    }
  }
  out.repeated = [...seen].filter(([, n]) => n > REPEAT_MAX).map(([t, n]) => `${n}x ${t.slice(0, 80)}`);
  const pre = document.createElement('pre'); pre.id = 'clustercert-probe';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""

PT = 72.0
A4 = (595.276, 841.89)
MARGIN = {"top": 20 * PT / 25.4, "right": 15 * PT / 25.4, "bottom": 20 * PT / 25.4, "left": 15 * PT / 25.4}
# a printed page's body height in CSS pixels (96 per inch): a cell taller than this cannot fit on one page
PAGE_PX = (A4[1] - MARGIN["top"] - MARGIN["bottom"]) * 96 / PT
# a sentence said more often than this fails: twice may be a finding and its detail, three times is noise
REPEAT_MAX = 2


def check_html(html: Path, chromium: str, width: int) -> dict[str, Any]:
    """Overflowing tables, missing or unlabelled images, cells taller than a page, tables without rows and sentences
    of REPEAT_WORDS words or more said more than REPEAT_MAX times (`repeated`), each of which fails, as laid out by
    Chromium at `width` CSS pixels."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.html"
        script = (PROBE.replace("PAGE_PX", f"{PAGE_PX:.0f}").replace("REPEAT_MAX", str(REPEAT_MAX))
                  .replace("REPEAT_WORDS", str(REPEAT_WORDS)))
        probe.write_text(html.read_text(encoding="utf-8").replace("</body>", script + "</body>"), encoding="utf-8")
        done = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
             "--no-first-run", f"--user-data-dir={tmp}/profile", f"--window-size={width},2000",
             "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
            capture_output=True, text=True, timeout=180, check=False)
    match = re.search(r'<pre id="clustercert-probe">(.*?)</pre>', done.stdout, re.S)
    if match is None:
        return {"ok": False, "error": f"chromium printed no probe result (exit {done.returncode}): "
                                      f"{done.stderr.strip()[-300:]}"}
    found = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                       .replace("&gt;", ">"))
    found["ok"] = (not found["tables"] and not found["images"] and found["count_images"] > 0
                   and not found["tall_cells"] and not found["empty_tables"] and not found["repeated"])
    return dict(found)


def _image_digests(reader: Any) -> set[str]:
    """The sha256 of every image XObject's stream (pages and forms may share one: distinct images, not
    references). The streams are hashed as stored, still encoded (WeasyPrint's encoder is deterministic: the same
    image is the same stream): pypdf's `page.images` would decode and re-encode each image with Pillow (18 s for the
    sample's 21 charts), and `get_data()` undoes each row's PNG predictor in Python (2.8 s for them, 04:10 UTC)."""
    digests: set[str] = set()
    visited: set[int] = set()

    def walk(resources: Any) -> None:
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        for ref in (xobjects.get_object().values() if xobjects is not None else []):
            number = getattr(ref, "idnum", None)
            if number is not None:
                if number in visited:
                    continue
                visited.add(number)
            obj = ref.get_object()
            if obj.get("/Subtype") == "/Image":
                stored = getattr(obj, "_data", None)  # pypdf keeps a stream's bytes as read from the file there
                digests.add(hashlib.sha256(stored if isinstance(stored, bytes) else obj.get_data()).hexdigest())
            elif obj.get("/Subtype") == "/Form":
                walk(obj.get("/Resources"))

    for page in reader.pages:
        walk(page.get("/Resources"))
    return digests


def check_pdf(pdf: Path, pdftoppm: str, dpi: int) -> dict[str, Any]:
    """Blank pages, ink in the right margin (an overflowing table or figure), and the images the PDF holds."""
    from PIL import Image
    from pypdf import PdfReader

    reader = PdfReader(pdf)
    images = _image_digests(reader)
    blank, overflow = [], []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([pdftoppm, "-r", str(dpi), "-gray", "-png", str(pdf), f"{tmp}/p"], check=True, timeout=300)
        pages = sorted(Path(tmp).glob("p-*.png"))
        scale = dpi / PT
        for number, path in enumerate(pages, 1):
            with Image.open(path) as im:
                gray = im.convert("L")
                w, h = gray.size
                top, bottom = int(MARGIN["top"] * scale), h - int(MARGIN["bottom"] * scale)
                body = gray.crop((0, top, w, bottom))
                ink = sum(body.histogram()[:200])
                if ink < 0.002 * body.width * body.height:
                    blank.append(number)
                right = gray.crop((w - int(MARGIN["right"] * scale) + 2, top, w, bottom))
                if sum(right.histogram()[:200]) > 0:
                    overflow.append(number)
    return {"ok": not blank and not overflow, "pages": len(reader.pages), "blank_pages": blank,
            "pages_with_ink_in_the_right_margin": overflow, "images": len(images)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run_dir", type=Path, help="a run folder (report.html and report.pdf)")
    parser.add_argument("--dpi", type=int, default=60)
    parser.add_argument("--width", type=int, default=1024, help="Chromium window width in CSS pixels")
    parser.add_argument("--out", type=Path, help="write the findings as JSON here too")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    pdftoppm = shutil.which("pdftoppm")
    if chromium is None or pdftoppm is None:
        print("needs Debian's chromium and poppler-utils: apt-get install -y chromium poppler-utils", file=sys.stderr)
        return 2
    findings: dict[str, Any] = {}
    for stem in ("report", "report.redacted"):
        html, pdf = args.run_dir / f"{stem}.html", args.run_dir / f"{stem}.pdf"
        if not html.exists():
            continue
        findings[stem] = {"html": check_html(html, chromium, args.width), "pdf": check_pdf(pdf, pdftoppm, args.dpi)}
        result = findings[stem]
        html_imgs = result["html"].get("count_images", -1)
        if result["pdf"]["images"] < html_imgs:
            result["pdf"]["ok"] = False
            result["pdf"]["missing_charts"] = html_imgs - result["pdf"]["images"]
    ok = bool(findings) and all(r["html"]["ok"] and r["pdf"]["ok"] for r in findings.values())
    text = json.dumps({"ok": ok, "run_dir": str(args.run_dir), "findings": findings}, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
