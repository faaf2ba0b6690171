#!/usr/bin/env python3
"""Ask Throttle whether a request may go ahead (standard library only).

    THROTTLE_URL=http://localhost:8080 python3 examples/python/check.py --count 5 --limit 3

Uses THROTTLE_API_KEY when set; otherwise registers a client of its own (a
name and email of the run's own, to tell it from the server's others) and
prints its key (shown once: keep it). Prints one line per check:

    check 1: allowed remaining=2 limit=3 reset_at=1767225600
    check 4: rejected retry_after=42 limit=3 reset_at=1767225600
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


def call(base_url, path, body, api_key=None):
    """POST body as JSON; return (status, parsed reply). Error statuses are replies too."""
    req = urllib.request.Request(
        base_url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    if api_key:
        req.add_header("X-API-Key", api_key)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:  # 4xx/5xx (and 429) still carry a JSON body
        try:
            return e.code, json.load(e)
        except ValueError:
            return e.code, {"error": e.reason}
    except urllib.error.URLError as e:  # not reachable: connection refused, DNS, timeout
        sys.exit(f"throttle: {base_url}{path}: {e.reason}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("THROTTLE_URL", "http://localhost:8080"))
    p.add_argument("--identifier", default="user_123", help="who the requests count against")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--window", type=int, default=60, help="seconds")
    p.add_argument("--algorithm", default="sliding_window",
                   choices=["fixed_window", "sliding_window", "token_bucket", "gcra"])
    p.add_argument("--count", type=int, default=1, help="how many checks to make")
    args = p.parse_args()

    api_key = os.environ.get("THROTTLE_API_KEY")
    if not api_key:
        run = f"{int(time.time())}-{os.getpid()}"
        status, reply = call(args.url, "/register", {
            "name": f"python-example-{run}", "email": f"python-{run}@example.com",
            "default_algorithm": args.algorithm,
        })
        if status != 201 or "api_key" not in reply:
            sys.exit(f"register: HTTP {status} {reply.get('code', '')}: {reply.get('error', reply)}")
        api_key = reply["api_key"]
        print(f"registered client {reply['client_id']}; export THROTTLE_API_KEY={api_key}", file=sys.stderr)

    for i in range(1, args.count + 1):
        status, d = call(args.url, "/check", {
            "identifier": args.identifier, "limit": args.limit,
            "window": args.window, "algorithm": args.algorithm,
        }, api_key)
        if status not in (200, 429):
            sys.exit(f"check: HTTP {status}: {d.get('error', d)}")
        if d["allowed"]:
            print(f"check {i}: allowed remaining={d['remaining']} limit={d.get('limit')} reset_at={d['reset_at']}")
        else:
            print(f"check {i}: rejected retry_after={d['retry_after']} limit={d.get('limit')} reset_at={d['reset_at']}")


if __name__ == "__main__":
    main()
