import torch


class MNIST(torch.utils.data.Dataset):
    """Random MNIST-shaped samples (1x28x28 float, label 0-9), 6000 to train, 1000 to test."""

    def __init__(self, root, train=True, download=False, transform=None):
        g = torch.Generator().manual_seed(1 if train else 2)
        n = 6000 if train else 1000
        self.x = torch.randn(n, 1, 28, 28, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]
