#!/usr/bin/python3
"""A baseline of `actortrain bench`: PyTorch Hogwild on one machine.

The MLP 784-256-128-10 lives in shared memory (Tensor.share_memory_); --trainers
processes (default 2) train it at once without locks, as PyTorch's Hogwild example
does: each process has its own Adam(0.001) over the shared parameters, computes a
step's gradients on its copy of the shared tensors and updates them in place. A
trainer trains on every trainers-th image of Fashion-MNIST's training set (batch 128,
shuffled each epoch from --seed).

Prints one JSON line: samples_per_second (training samples over the time from the
common start to the last trainer's end), accuracy (the shared model on the 10,000
test images), accuracy_at (after each epoch's updates, the training seconds so far
and the test accuracy of the parameters then: the process whose update completes an
epoch copies them, and they are evaluated after training, so no evaluation counts as
training time), updates and the settings. Needs Debian's python3-torch and
libopenblas0-pthread: it refuses to run on the reference BLAS, many times slower
(fashion_mnist_torch.blas_problem). Every process uses --threads intra-op threads
(default 1, as the ActorTrain workers compute on one thread each).
"""

import argparse
import json
import queue
import sys
import time

import torch
import torch.multiprocessing as mp
from torch import nn

from fashion_mnist_torch import (accuracy_at, add_common_flags, check_common_flags, load, make_model, steps_per_epoch,
                                 test_accuracy)


def trainer(rank, args, model, updates, start, snapshots):
    torch.set_num_threads(args.threads)
    x, y = load(args.data_dir, "train")
    mine = torch.arange(rank, len(x), args.trainers)
    x, y = x[mine], y[mine]
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    per_epoch = steps_per_epoch(60000, args.trainers, args.batch)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    start.wait()  # every trainer has its data: the clock starts
    began = time.perf_counter()
    for _ in range(args.epochs):
        order = torch.randperm(len(x), generator=gen)
        for first in range(0, len(x), args.batch):
            idx = order[first:first + args.batch]
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            optimizer.step()
            with updates.get_lock():
                updates.value += 1
                done = updates.value
            if done % per_epoch == 0:
                snapshots.put((time.perf_counter() - began, [p.detach().numpy().copy() for p in model.parameters()]))
    snapshots.put(("end", time.perf_counter() - began))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_flags(p, "processes training the shared model")
    args = p.parse_args()
    check_common_flags(p, args)
    # Before anything computes: the trainers are forked from this process, and a thread
    # pool it started would be inherited in a broken state (GNU OpenMP is not fork-safe).
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = make_model()
    model.share_memory()
    ctx = mp.get_context("fork")
    updates = ctx.Value("q", 0)
    start = ctx.Barrier(args.trainers)
    snapshots = ctx.Queue()
    procs = [ctx.Process(target=trainer, args=(rank, args, model, updates, start, snapshots))
             for rank in range(args.trainers)]
    for proc in procs:
        proc.start()
    taken, ends = [], []
    while len(ends) < args.trainers:  # drain the queue before joining: a full pipe blocks its writer
        try:
            item = snapshots.get(timeout=1)
        except queue.Empty:
            dead = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
            if dead:
                for proc in procs:
                    proc.kill()
                print(f"pytorch_hogwild: a trainer exited with {dead[0]}", file=sys.stderr)
                return 1
            continue
        if item[0] == "end":
            ends.append(item[1])
        else:
            taken.append(item)
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            print(f"pytorch_hogwild: a trainer exited with {proc.exitcode}", file=sys.stderr)
            return 1
    seconds = max(ends)
    test = load(args.data_dir, "t10k")
    accuracy = test_accuracy(model, test)
    taken.sort(key=lambda s: s[0])
    print(json.dumps({"samples_per_second": 60000 * args.epochs / seconds, "accuracy": accuracy,
                      "accuracy_at": accuracy_at(taken, test),
                      "updates": updates.value, "seconds": seconds, "epochs": args.epochs,
                      "trainers": args.trainers, "threads": args.threads, "torch": torch.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
