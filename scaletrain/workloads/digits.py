"""scikit-learn's handwritten digits: 1,797 real 8×8 images in 10 classes, shipped with the
package (nothing is downloaded), with a held-out split fixed by the seed."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

HELD_OUT_FRACTION = 0.2


def digits_datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8) in [0, 1]
    labels = torch.tensor(data.target, dtype=torch.int64)
    train_idx, test_idx = train_test_split(range(len(labels)), test_size=HELD_OUT_FRACTION,
                                           random_state=seed, stratify=data.target)
    train_idx, test_idx = torch.tensor(train_idx), torch.tensor(test_idx)
    return (TensorDataset(images[train_idx], labels[train_idx]),
            TensorDataset(images[test_idx], labels[test_idx]))
