"""Run one command; report its wall time and the peak resident memory of its whole process tree.

  python bench/peakrss.py RESULT.json -- CMD [ARGS...]

This wrapper is started fresh for every measured command, so getrusage(RUSAGE_CHILDREN) sees only
that command's process tree: its ru_maxrss is the high-water mark of the largest single process in
the tree (exact, from the kernel). In case the command runs several processes at once, the tree's
summed RSS is also sampled from /proc every 100 ms (about 1.6 ms of one core per sample); the
reported peak is the larger of the two.
Also reported: user+system CPU seconds of the tree, and the 1-minute load average before and
after (to spot runs disturbed by other work on the machine). The command's stdout/stderr are
this wrapper's own (the caller redirects them). Exit code: the command's.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
INTERVAL_S = 0.1


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def tree_rss_bytes(root: int) -> int:
    kids = _children_map()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(kids.get(pid, ()))
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    result_path, cmd = argv[0], argv[2:]
    sampled = 0
    load_before = _loadavg()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    while proc.poll() is None:
        sampled = max(sampled, tree_rss_bytes(proc.pid))
        time.sleep(INTERVAL_S)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    ru_maxrss_kb = usage.ru_maxrss  # KiB on Linux
    result = {
        "cmd": cmd,
        "rc": proc.returncode,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        # 1-minute load average before and after: > cores means something else competed for the CPUs
        "loadavg_1m": [load_before, _loadavg()],
        "ru_maxrss_mb": ru_maxrss_kb / 1024,
        "tree_rss_sampled_mb": sampled / 2**20,
        "peak_mb": max(ru_maxrss_kb / 1024, sampled / 2**20),
    }
    with open(result_path, "w") as f:
        json.dump(result, f, indent=1)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
