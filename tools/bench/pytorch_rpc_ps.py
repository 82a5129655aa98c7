#!/usr/bin/python3
"""The baseline of `actortrain bench cluster`: PyTorch's RPC framework as a parameter server.

One server process holds the MLP 784-256-128-10 and its Adam(0.001) optimizer; 2 trainer
processes each train on their half of Fashion-MNIST's training set (batch 128, shuffled
each epoch from --seed). A trainer computes a step's forward and backward passes on its
own copy of the model, sends the gradients to the server with rpc_sync (TensorPipe over
127.0.0.1), and the server applies them at once (asynchronous, under a lock) and answers
with the new parameters, which the trainer loads for its next step. This is the layout
the issue's reference names (2 trainers, 1 server, TensorPipe).

Prints one JSON line: samples_per_second (training samples over the time from the first
trainer's start to the last one's end; no evaluation inside), accuracy (the server's
model on the 10,000 test images), accuracy_at (after each epoch's updates, the training
seconds so far and the test accuracy of the parameters then: the server copies them
when its update count completes an epoch, and they are evaluated after training, so
no evaluation counts as training time), staleness (the mean number of updates applied between
the read of a step's parameters and its own update, as ActorTrain counts it), updates
and the settings. Needs Debian's python3-torch and libopenblas0-pthread: it refuses to
run on the reference BLAS, many times slower (fashion_mnist_torch.blas_problem). Every process uses --threads intra-op threads (default 1, as the ActorTrain
workers compute on one thread each).
"""

import argparse
import json
import socket
import sys
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
from torch import nn

from fashion_mnist_torch import (accuracy_at, add_common_flags, check_common_flags, load, make_model,
                                 steps_per_epoch, test_accuracy)


class Server:
    """The parameter server's state; its functions run on the server's RPC threads."""
    model = None
    optimizer = None
    lock = threading.Lock()
    started = None
    finished = []
    version = 0      # updates applied so far
    staleness = []   # per update: updates applied between its parameters' read and it
    per_epoch = 0    # updates in one pass over the data
    snapshots = []   # (training seconds, parameters) after each epoch's last update


def snapshot():
    return [p.detach().clone() for p in Server.model.parameters()], Server.version


def server_parameters():
    with Server.lock:
        if Server.started is None:
            Server.started = time.perf_counter()
        return snapshot()


def server_apply(grads, read_version):
    with Server.lock:
        Server.staleness.append(Server.version - read_version)
        for p, g in zip(Server.model.parameters(), grads):
            p.grad = g
        Server.optimizer.step()
        Server.version += 1
        if Server.version % Server.per_epoch == 0:
            Server.snapshots.append((time.perf_counter() - Server.started,
                                     [p.detach().clone() for p in Server.model.parameters()]))
        return snapshot()


def server_finish():
    with Server.lock:
        Server.finished.append(time.perf_counter())


def trainer(rank, args):
    x, y = load(args.data_dir, "train")
    mine = torch.arange(rank - 1, len(x), args.trainers)  # this trainer's half
    x, y = x[mine], y[mine]
    model = make_model()
    loss_fn = nn.CrossEntropyLoss()
    params, version = rpc.rpc_sync("server", server_parameters)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    for _ in range(args.epochs):
        order = torch.randperm(len(x), generator=gen)
        for start in range(0, len(x), args.batch):
            with torch.no_grad():
                for p, v in zip(model.parameters(), params):
                    p.copy_(v)
            idx = order[start:start + args.batch]
            model.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            params, version = rpc.rpc_sync("server", server_apply,
                                           args=([p.grad for p in model.parameters()], version))
    rpc.rpc_sync("server", server_finish)


def run(rank, args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{args.port}", num_worker_threads=8,
                                              rpc_timeout=600)
    name = "server" if rank == 0 else f"trainer{rank}"
    if rank == 0:
        Server.model = make_model()
        Server.optimizer = torch.optim.Adam(Server.model.parameters(), lr=args.lr)
        Server.per_epoch = steps_per_epoch(60000, args.trainers, args.batch)
    rpc.init_rpc(name, rank=rank, world_size=args.trainers + 1, rpc_backend_options=options)
    if rank > 0:
        trainer(rank, args)
    rpc.shutdown()  # waits for every process
    if rank == 0:
        test = load(args.data_dir, "t10k")
        accuracy = test_accuracy(Server.model, test)
        seconds = max(Server.finished) - Server.started
        print(json.dumps({"samples_per_second": 60000 * args.epochs / seconds, "accuracy": accuracy,
                          "accuracy_at": accuracy_at(Server.snapshots, test),
                          "staleness": sum(Server.staleness) / max(1, len(Server.staleness)),
                          "updates": Server.version, "seconds": seconds, "epochs": args.epochs,
                          "trainers": args.trainers,
                          "threads": args.threads, "torch": torch.__version__}), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_flags(p, "trainer processes (besides the server)")
    args = p.parse_args()
    check_common_flags(p, args)
    args.port = free_port()
    mp.spawn(run, args=(args,), nprocs=args.trainers + 1, join=True)


if __name__ == "__main__":
    sys.exit(main())
