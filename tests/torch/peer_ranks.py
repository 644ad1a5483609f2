"""Starts a PyTorch peer script once per rank on this machine (the launch environment over
loopback, as torchrun would set it), for the peers the C++ tests compare against."""
import os
import socket
import subprocess
import sys


def run_ranks(script, world, argv, timeout):
    """Runs `script argv --rank r` for every rank r < world; exits naming the exit codes when any
    rank failed, and kills what is left when one hangs past `timeout` seconds."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
        procs.append(subprocess.Popen([sys.executable, script] + argv + ["--rank", str(rank)], env=env))
    try:
        codes = [p.wait(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if any(codes):
        sys.exit("PyTorch ranks failed: exit codes %s" % codes)
