"""A program a person attaches to: says it is ready, then answers every input line."""

import sys

print("ready: echo program", flush=True)
for line in sys.stdin:
    print(f"echo:{line.strip()}", flush=True)
