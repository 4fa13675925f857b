"""``python -m tests.soak [--duration SECONDS] …`` (``make soak ARGS=…``)."""

from __future__ import annotations

import argparse
import sys

from tests.soak.run import Options, main


def parse(argv: list[str]) -> Options:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    p.add_argument("--duration", type=float, default=d.duration, help="seconds (default 300)")
    p.add_argument("--agents", type=int, default=d.agents)
    p.add_argument("--spaces", type=int, default=d.spaces)
    p.add_argument("--rate", type=float, default=d.rate, help="publishes per second in all")
    p.add_argument("--churn", type=float, default=d.churn, help="connections cut per second")
    p.add_argument("--nodes", type=int, default=d.nodes)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--redis",
        choices=("single", "sentinel", "cluster"),
        default=d.redis,
        help="one redis-server (restarted empty mid-run), a Sentinel setup or a Redis Cluster"
        " (a master killed mid-run)",
    )
    p.add_argument("--markdown", metavar="FILE", help="also write the report to FILE")
    a = p.parse_args(argv)
    return Options(
        a.duration, a.agents, a.spaces, a.rate, a.churn, a.nodes, a.seed, a.markdown, a.redis
    )


if __name__ == "__main__":
    sys.exit(main(parse(sys.argv[1:])))
