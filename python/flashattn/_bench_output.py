"""The JSON file of flashattn.bench's three tables (the dense grid, --variants, --decode): one
object {"meta": ..., "rows": [...], "summary": ...}, the same layout for each, so one reader
serves them all (docs/bench/*.json)."""
from __future__ import annotations

import json


def write_json(path: str, meta: dict, rows: list, summary) -> None:
    """Writes the table to `path` and says so on stdout."""
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows, "summary": summary}, f, indent=1)
    print(f"\nwrote {path}")
