"""What the PyTorch baselines of `actortrain bench` share: Fashion-MNIST from Debian's
IDX files, the MLP 784-256-128-10, the checks of common flags (and of the BLAS PyTorch
runs on), and accuracy per epoch measured from parameter snapshots after training (so
evaluation never counts as training time).

Run as a program, it prints why this machine's PyTorch would not give a fair baseline
and exits 3 (UNFAIR_BLAS), or prints nothing and exits 0 (`actortrain bench` asks it
first)."""

import gzip
import os
import struct
import sys

import numpy as np
import torch
from torch import nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, part):
    """Pixels in [0, 1] as float32 rows, labels as int64 class ids."""
    images = read_idx(os.path.join(data_dir, f"{part}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{part}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


def make_model():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def add_common_flags(p, trainers_help):
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--trainers", type=int, default=2, help=trainers_help)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")


# The exit status of this module run as a program when blas_problem() has something to say.
UNFAIR_BLAS = 3


def blas_problem(maps="/proc/self/maps"):
    """Why the BLAS this process has loaded (`maps`: its /proc/PID/maps) would make an
    unfair baseline, or "" when it would not. Debian's python3-torch takes the system's
    libblas.so.3, which is the reference implementation (package libblas3) unless a faster
    one is installed and chosen; docs/benchmarks.md has what that cost here."""
    reference = set()
    with open(maps) as f:
        for line in f:
            fields = line.split(None, 5)  # the path is the sixth field (it may hold spaces)
            if len(fields) == 6 and "/blas/libblas.so" in fields[5]:
                reference.add(fields[5].strip())
    # Its matrix products are the ones called, even beside OpenBLAS's LAPACK (measured).
    if reference:
        return (f"PyTorch runs on the reference BLAS ({sorted(reference)[0]}), many times slower than OpenBLAS: its "
                "figures would not be a fair baseline (apt-get install libopenblas0-pthread, or point libblas.so.3 "
                "at it with update-alternatives)")
    return ""


def check_common_flags(p, args):
    """Exits 2 (argparse's usage error) naming a bad flag, a missing data file or a BLAS
    that would make the baseline unfair (blas_problem)."""
    problem = blas_problem()
    if problem:
        p.error(problem)
    if args.epochs < 1 or args.batch < 1 or args.trainers < 1 or args.threads < 1:
        p.error("--epochs, --batch, --trainers and --threads must be >= 1")
    if not args.lr > 0:
        p.error(f"--lr must be > 0, not {args.lr}")
    for part in ("train", "t10k"):
        for kind in ("images-idx3", "labels-idx1"):
            path = os.path.join(args.data_dir, f"{part}-{kind}-ubyte.gz")
            if not os.path.exists(path):
                p.error(f"{path}: no such file (install dataset-fashion-mnist, or give --data-dir)")


def steps_per_epoch(examples, trainers, batch):
    """Updates in one pass over `examples`, each trainer taking every trainers-th one in
    batches of `batch` (the last one short)."""
    return sum((len(range(rank, examples, trainers)) + batch - 1) // batch for rank in range(trainers))


def test_accuracy(model, test):
    """The accuracy of `model` on `test`, load(data_dir, "t10k")'s images and labels."""
    x, y = test
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def accuracy_at(snapshots, test):
    """[[training seconds, test accuracy]] for each (seconds, parameters) snapshot."""
    model = make_model()
    out = []
    for seconds, params in snapshots:
        with torch.no_grad():
            for p, v in zip(model.parameters(), params):
                p.copy_(torch.as_tensor(v))
        out.append([seconds, test_accuracy(model, test)])
    return out


if __name__ == "__main__":
    why = blas_problem()
    if why:
        print(why)
    sys.exit(UNFAIR_BLAS if why else 0)
