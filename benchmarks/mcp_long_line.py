"""`ark mcp` fed one 200 MB line (issue 51): initialize and tools/list, then the line, then tools/list again. Prints
each reply's start and the server's resident memory (VmRSS, and VmHWM: its peak) before and after the line.
Run from the clone's root with the graph of the default config built: `python benchmarks/mcp_long_line.py`."""
import json
import subprocess
import sys
from pathlib import Path


def memory(pid: int) -> str:
    return " ".join(line.split(":")[0] + " " + line.split(":")[1].strip() for line in open(f"/proc/{pid}/status")
                    if line.startswith(("VmRSS", "VmHWM")))


def main() -> None:
    ark = Path(sys.executable).with_name("ark")
    p = subprocess.Popen([str(ark), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(message: dict) -> None:
        p.stdin.write(json.dumps(message).encode() + b"\n")
        p.stdin.flush()

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}})
    print(p.stdout.readline()[:100])
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    p.stdout.readline()
    print("before the line:", memory(p.pid))
    p.stdin.write(b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"pad":"')
    for _ in range(200):
        p.stdin.write(b"x" * (1 << 20))
    p.stdin.write(b'"}}\n')
    p.stdin.flush()
    print(p.stdout.readline()[:160])
    send({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
    print(p.stdout.readline()[:100])
    print("after the line:", memory(p.pid))
    p.stdin.close()
    print("exit status", p.wait(timeout=60))


if __name__ == "__main__":
    main()
