"""Run a long set-up step with its output in a log, printing a line every so often.

    python scripts/heartbeat.py --what "installing X" --log LOG [--every 30] -- CMD...

Prints WHAT, runs CMD with stdout and stderr in LOG, and while it runs prints the
elapsed time every EVERY seconds, with the build step a CMake/Ninja build last
reported in the log (``[57/83]``), so a source build that takes minutes is never
silent. On failure prints the log's last 60 lines and where the log is, like the
Makefile's ``logged`` macro; exits with CMD's status.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

# Ninja's progress prefix, "[57/83] ..." (pip -v passes the build's output through).
_STEP = re.compile(rb"\[(\d+)/(\d+)\]")
_TAIL_BYTES = 64 << 10


def _minutes(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def last_step(log: Path) -> str | None:
    """The last ``[n/m]`` build step in the log's tail, as "step n of m"."""
    try:
        with log.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(f.tell() - _TAIL_BYTES, 0))
            tail = f.read()
    except OSError:
        return None
    steps = _STEP.findall(tail)
    if not steps:
        return None
    n, m = steps[-1]
    return f"build step {int(n)} of {int(m)}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--what", required=True, help="the line printed first")
    p.add_argument("--log", required=True, type=Path)
    p.add_argument("--every", type=float, default=30.0, help="seconds between lines")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.error("no command after --")
    print(args.what, flush=True)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with args.log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        done = threading.Event()

        def beat() -> None:
            while not done.wait(args.every):
                step = last_step(args.log)
                where = f", {step}" if step else ""
                print(f"  ... {_minutes(time.monotonic() - start)}{where}", flush=True)

        t = threading.Thread(target=beat, daemon=True)
        t.start()
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            code = proc.wait()
        finally:
            done.set()
            t.join()
    if code != 0:
        lines = args.log.read_text(encoding="utf-8", errors="replace").splitlines()
        print("\n".join(lines[-60:]))
        print(f"failed: {args.what} (full log: {args.log})", flush=True)
        return code or 1
    print(f"  done in {_minutes(time.monotonic() - start)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
