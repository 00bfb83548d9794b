"""Class balance of every labels file (``data/labels``, ``data/probe_training/labels``,
``data/probe_check/labels``) as a Markdown table.

``python scripts/studies/label_balance.py`` prints it; ``--write`` puts it into ``data/labels/README.md``
between the ``<!-- balance -->`` markers. Counts and settings are read from the records themselves.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: its data/ folder

from grade.batch.labeling import read_records

LABELS = ROOT / "data" / "labels"
FOLDERS = (LABELS, ROOT / "data" / "probe_training" / "labels", ROOT / "data" / "probe_check" / "labels")
README = LABELS / "README.md"
MARKERS = ("<!-- balance -->", "<!-- /balance -->")


def _setting(records: list[dict], key: str) -> str:
    values = Counter(str(r.get(key)) for r in records if r.get(key) is not None)
    return ", ".join(sorted(values)) or "–"


def balance_table(folders=FOLDERS) -> str:
    lines = [
        "| model | file | questions | answerable | unanswerable | no label | matcher | samples | max new tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    paths = sorted((p for folder in folders for p in folder.glob("*/*.jsonl*")), key=lambda p: (p.parent.name, str(p)))
    for path in paths:
        records = read_records(path)
        labels = Counter(r.get("label") for r in records)
        lines.append(
            f"| {path.parent.name} | `{path.relative_to(ROOT / 'data')}` | {len(records)} | {labels[1]} | {labels[0]} | {labels[None]} "
            f"| {_setting(records, 'matcher')} | {_setting(records, 'n_samples')} | {_setting(records, 'max_new_tokens')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"replace the table in {README.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    import subprocess

    subprocess.run(["bash", str(ROOT / "scripts/build/restore_benchmark_caches.sh"), "--labels"], check=True)  # the label files kept in history
    table = balance_table()
    if not args.write:
        print(table)
        return 0
    text = README.read_text()
    start, end = MARKERS
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        print(f"{README}: no {start} ... {end} block to replace", file=sys.stderr)
        return 1
    README.write_text(pattern.sub(lambda _: f"{start}\n{table}\n{end}", text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
