"""What the PyTorch baselines of `actortrain bench` share: Fashion-MNIST from Debian's
IDX files, the MLP 784-256-128-10, the checks of common flags, and accuracy per epoch
measured from parameter snapshots after training (so evaluation never counts as
training time)."""

import gzip
import os
import struct

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


def check_common_flags(p, args):
    """Exits 2 (argparse's usage error) naming a bad flag or a missing data file."""
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
