"""Ports of the train job's process groups, chosen by the kernel so that jobs on one machine never share one.

Every process group the train stage opens meets on a TCP port: torchrun's rendezvous of the data-parallel ranks,
the vLLM server's HTTP port and its weight-sync group (arc_pipeline/training/launch.py), and, in a single process,
the torch.distributed group of the colocated vLLM engine (``MASTER_PORT``). Left to itself, TRL gives that last
one port 29500 whenever 29500 looks free; two train jobs started together on one machine (two presets, a sweep,
``--resources gpus=N``) both see it free before either binds it, and the second dies with EADDRINUSE. A port
the kernel hands out for ``bind(("127.0.0.1", 0))`` is drawn from the ephemeral range at random instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket

log = logging.getLogger(__name__)

HOST = "127.0.0.1"  # every process of a train job runs on one machine
PORT_VARIABLE = "MASTER_PORT"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on this machine now (all sockets held until all are chosen)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]


def claim_rendezvous_port() -> int:
    """Set ``MASTER_PORT`` (and ``MASTER_ADDR``) of this process's torch.distributed group to a free port the
    kernel chose, unless they are set already (torchrun's ranks, a site's own setting). The port in use."""
    os.environ.setdefault("MASTER_ADDR", HOST)
    if os.environ.get(PORT_VARIABLE, "").strip() not in ("", "0", "auto"):
        return int(os.environ[PORT_VARIABLE])
    (port,) = free_ports(1)
    os.environ[PORT_VARIABLE] = str(port)
    log.info("torch.distributed rendezvous of this process on %s:%d", os.environ["MASTER_ADDR"], port)
    return port
