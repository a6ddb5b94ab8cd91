"""The README's pictures, made from the browser tests so they stay current (tiny stand-in, labelled).

Runs the browser tests that leave a finished Caption, Find and Compare page in
``test-artifacts/screenshots/`` (a real ``python app.py --model tiny`` server, Debian chromium), then
writes small copies to ``docs/screenshots/``: the top of each desktop page at 1000 px wide and one phone
page, reduced to a 96-colour palette.

    python scripts/readme_screenshots.py            # run the tests, then write the pictures
    python scripts/readme_screenshots.py --no-run   # only convert the screenshots already there
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "test-artifacts" / "screenshots"
OUT = ROOT / "docs" / "screenshots"
TESTS = "caption_checks_the_clip or find_waits_for_a_query or compare_shows_both_variants"
#: (screenshot, README picture, width, the page height kept, in the screenshot's pixels)
PICTURES = (
    ("1_caption.png", "caption.png", 1000, 1500),
    ("2_find.png", "find.png", 1000, 1400),
    ("3_compare.png", "compare.png", 900, 3200),
    ("1_caption_phone.png", "caption_phone.png", 360, 1800),
)


def convert(src: Path, dst: Path, width: int, keep: int) -> None:
    from PIL import Image

    with Image.open(src) as img:
        page = img.convert("RGB").crop((0, 0, img.width, min(img.height, keep)))
        height = round(page.height * width / page.width)
        small = page.resize((width, height), Image.Resampling.LANCZOS)
        # octree keeps the clips' saturated colours (median cut turned the red ball grey)
        small.quantize(colors=96, method=Image.Quantize.FASTOCTREE).save(dst, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-run", action="store_true", help="only convert the screenshots already there")
    args = parser.parse_args(argv)
    if not args.no_run:
        cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               "tests/test_browser.py", "-k", TESTS]  # fmt: skip
        if subprocess.run(cmd, cwd=ROOT, check=False).returncode != 0:
            print("error: the browser tests failed: no pictures written", file=sys.stderr)
            return 1
    OUT.mkdir(parents=True, exist_ok=True)
    for name, picture, width, keep in PICTURES:
        src = SHOTS / name
        if not src.exists():
            print(f"error: {src} is missing: run without --no-run", file=sys.stderr)
            return 1
        convert(src, OUT / picture, width, keep)
        print(f"{OUT / picture}: {(OUT / picture).stat().st_size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
