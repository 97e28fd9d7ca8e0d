"""Look at Prefect's UI the way an operator would: the runs page and a run's summary artifact, photographed in headless
Chromium, with the text each page shows once its data has loaded.

    .venv/bin/python bench/check_ui.py --api-url http://127.0.0.1:4411/api --out ui-shots

writes runs.png, summary.png and their text (runs.txt, summary.txt) and prints what it wrote; exit 1 when a page never
showed an outcome (CERTIFIED, NOT CERTIFIED, INCOMPLETE)."""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["OUTCOMES", "find_chromium", "latest_summary_id", "look", "page_text", "screenshot"]

OUTCOMES = ("NOT CERTIFIED", "INCOMPLETE", "CERTIFIED")
# Chromium as a tool, not a browser: no first-run work, no calls home, no background fetches, a fresh profile
_QUIET = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--disable-extensions")
# The UI is a single-page app: its data arrives after the page's load event. Virtual time runs the page until it
# is idle (its API answers in), up to this budget, however long that takes on the wall clock
_BUDGET_MS = 60_000
_WINDOW = "1400,1400"


def find_chromium() -> str | None:
    """Debian's chromium (or chromium-browser) on the PATH, else None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(chromium: str, url: str, *action: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="clustercert-chromium-") as profile:
        return subprocess.run(
            [chromium, *_QUIET, f"--user-data-dir={profile}", f"--window-size={_WINDOW}",
             f"--virtual-time-budget={_BUDGET_MS}", "--run-all-compositor-stages-before-draw", *action, url],
            capture_output=True, text=True, timeout=timeout_s, check=False)


def _text(dom: str) -> str:
    """What a page shows: its DOM without scripts, styles and tags, whitespace collapsed."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom))).strip()


def page_text(chromium: str, url: str, expect: str, tries: int = 3) -> str:
    """The text the page at `url` shows once it shows `expect` (asked again up to `tries` times: on a busy machine
    the UI's first answers can be late); the last text read when it never does."""
    text = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(2.0)
        text = _text(_chromium(chromium, url, "--dump-dom").stdout)
        if expect in text:
            break
    return text


def screenshot(chromium: str, url: str, png: Path) -> None:
    """A PNG of the page at `url` as a 1400x1400 window shows it; OSError when Chromium wrote none."""
    png.unlink(missing_ok=True)
    done = _chromium(chromium, url, f"--screenshot={png}")
    if not png.is_file():
        raise OSError(f"chromium wrote no screenshot of {url} (exit {done.returncode}): {done.stderr.strip()[-300:]}")


def latest_summary_id(api_url: str, key: str | None = None) -> str:
    """The id of the newest summary artifact (key `key`, else any key clustercert-*-summary) on the server."""
    body = {"sort": "CREATED_DESC", "limit": 200}
    request = urllib.request.Request(f"{api_url.rstrip('/')}/artifacts/filter", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        found = json.load(response)
    for artifact in found:
        name = artifact.get("key") or ""
        if name == key if key else re.fullmatch(r"clustercert-.+-summary", name):
            return str(artifact["id"])
    raise LookupError(f"{api_url}: no summary artifact{f' with key {key}' if key else ''}")


def look(api_url: str, out: Path, chromium: str, key: str | None = None) -> dict[str, str]:
    """Photograph the runs page and the newest summary artifact of the server at `api_url` into `out`: by page
    (`runs`, `summary`), the text it showed (also written beside each PNG as .txt)."""
    ui = api_url.rstrip("/").removesuffix("/api")
    pages = {"runs": f"{ui}/runs", "summary": f"{ui}/artifacts/artifact/{latest_summary_id(api_url, key)}"}
    out.mkdir(parents=True, exist_ok=True)
    shown = {}
    for name, url in pages.items():
        # the runs page's list comes last: wait for a run's state badge, the summary's for its heading
        shown[name] = page_text(chromium, url, expect="CERTIFIED" if name == "runs" else "Why:")
        (out / f"{name}.txt").write_text(shown[name] + "\n", encoding="utf-8")
        screenshot(chromium, url, out / f"{name}.png")
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-url", required=True, help="the server's API, as PREFECT_API_URL names it")
    parser.add_argument("--out", type=Path, required=True, help="the folder the PNGs and their text go to")
    parser.add_argument("--key", help="the summary artifact's key (default: the newest clustercert-*-summary)")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("needs Debian's chromium: apt-get install -y chromium", file=sys.stderr)
        return 2
    shown = look(args.api_url, args.out, chromium, args.key)
    missing = [name for name, text in shown.items() if not any(outcome in text for outcome in OUTCOMES)]
    for name in shown:
        print(f"{args.out / name}.png: {'no outcome shown' if name in missing else 'shows the outcome'}")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
