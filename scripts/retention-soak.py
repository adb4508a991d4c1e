#!/usr/bin/env python3
"""Steady load on one SQLite replica with retention on, to watch the
database file stop growing (docs/benchmarks.md, "Retention").

Start a replica with a short window first, then run this against it:

    target/release/baton serve --database-url sqlite:///tmp/soak/baton.db \\
        --listen 127.0.0.1:3999 --retain-finished 1m &
    scripts/retention-soak.py http://127.0.0.1:3999 /tmp/soak/baton.db 600

It submits a 20-task plan (19 no-ops and one command printing 200 lines)
every 100 ms for DURATION seconds, and every 30 s prints the file sizes,
the pages and free pages SQLite reports, and the plans and runs kept.
Standard library only; the database is opened read-only.
"""
import json
import os
import sqlite3
import sys
import time
import urllib.request


def sizes(db):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        plans = conn.execute("SELECT COUNT(*) FROM plan").fetchone()[0]
        runs = conn.execute("SELECT COUNT(*) FROM task_run").fetchone()[0]
    finally:
        conn.close()
    wal = os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0
    return f"{os.path.getsize(db) / 1e6:.1f},{wal / 1e6:.1f},{pages},{free},{plans},{runs}"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    base, db, duration = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tasks = [{"name": f"t{i}", "target": f"soak/{i}", "sleep": "0s"} for i in range(19)]
    tasks.append({"name": "log", "target": "soak/log", "command": {"argv": [
        "sh", "-c", "for i in $(seq 200); do echo line $i of some output; done"]}})
    started, submitted, printed = time.time(), 0, 0.0
    print("elapsed_s,db_MB,wal_MB,pages,free_pages,plans,runs", flush=True)
    while time.time() - started < duration:
        body = json.dumps({"name": f"soak-{submitted}", "tasks": tasks}).encode()
        request = urllib.request.Request(
            base + "/api/v1/plans", body, {"content-type": "application/json"})
        urllib.request.urlopen(request).read()
        submitted += 1
        time.sleep(0.1)
        if time.time() - printed >= 30:
            printed = time.time()
            print(f"{int(printed - started)},{sizes(db)}", flush=True)
    print(f"submitted {submitted} plans", flush=True)


if __name__ == "__main__":
    main()
