"""Run every fuzz target for a time budget, one after the other, and tabulate what libFuzzer
reports: executions, coverage (``cov``: edges, ``ft``: features), corpus size, findings.

    python fuzz/run_all.py [--seconds 60] [--only NAME ...] [--log-dir fuzz/logs]

Findings (``crash-*``, ``timeout-*``, ``oom-*``) are written to fuzz/crashes/<target>-*.
Exit status 1 when any target found something.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_LINE = re.compile(r"^#(\d+)\s+\w+\s+(?:cov: (\d+) ft: (\d+) )?corp: (\d+)/")
_EXECS = re.compile(r"stat::number_of_executed_units: (\d+)")


def targets() -> list[Path]:
    return sorted(HERE.glob("target_*.py"))


def run(target: Path, seconds: int, log_dir: Path, timeout: int) -> dict[str, object]:
    crashes = HERE / "crashes"
    crashes.mkdir(exist_ok=True)
    log = log_dir / f"{target.stem}.log"
    cmd = [
        sys.executable,
        str(target),
        f"-max_total_time={seconds}",
        f"-timeout={timeout}",
        "-rss_limit_mb=4096",
        "-print_final_stats=1",
        f"-artifact_prefix={crashes}/{target.stem}-",
    ]
    start = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    text = log.read_text(errors="replace")
    runs = cov = ft = corpus = 0
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            runs = int(m.group(1))
            cov = int(m.group(2) or cov)
            ft = int(m.group(3) or ft)
            corpus = int(m.group(4))
    execs = _EXECS.search(text)
    # slow-unit-* files are inputs that merely took long (the whole-store target's child often does)
    found = [
        line.split("Test unit written to ")[-1]
        for line in text.splitlines()
        if "Test unit written to" in line and "slow-unit-" not in line
    ]
    return {
        "target": target.stem,
        "seconds": round(time.monotonic() - start),
        "runs": int(execs.group(1)) if execs else runs,
        "cov": cov,
        "ft": ft,
        "corpus": corpus,
        "exit": code,
        "findings": sorted(set(found)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--timeout", type=int, default=120, help="libFuzzer -timeout: seconds one input may take")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--log-dir", type=Path, default=HERE / "logs")
    args = ap.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for target in targets():
        if args.only and not any(name in target.stem for name in args.only):
            continue
        print(f"== {target.stem}: {args.seconds} s", flush=True)
        row = run(target, args.seconds, args.log_dir, args.timeout)
        print(f"   {row}", flush=True)
        rows.append(row)
    print(f"\n{'target':<28} {'runs':>9} {'cov':>6} {'ft':>6} {'corpus':>7}  findings")
    for r in rows:
        findings = r["findings"] or "-"
        print(f"{r['target']:<28} {r['runs']:>9} {r['cov']:>6} {r['ft']:>6} {r['corpus']:>7}  {findings}")
    return 1 if any(r["exit"] != 0 for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
