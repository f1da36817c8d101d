"""A typical Horovod PyTorch training script (MNIST-shaped synthetic data, no downloads),
running on rdmacoll. The only rdmacoll-specific line is the import: it was
`import horovod.torch as hvd`.

    mpiexec -n 2 python examples/torch_synthetic_train.py --epochs 2
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed

import rdmacoll.frameworks.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch synthetic-MNIST example")
parser.add_argument("--batch-size", type=int, default=64, help="input batch size for training")
parser.add_argument("--test-batch-size", type=int, default=256, help="input batch size for testing")
parser.add_argument("--epochs", type=int, default=2, help="number of epochs to train")
parser.add_argument("--lr", type=float, default=0.01, help="learning rate")
parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum")
parser.add_argument("--no-cuda", action="store_true", default=False, help="disables CUDA training")
parser.add_argument("--seed", type=int, default=42, help="random seed")
parser.add_argument("--log-interval", type=int, default=10, help="batches between logs")
parser.add_argument("--fp16-allreduce", action="store_true", default=False, help="fp16 compression")
parser.add_argument(
    "--batches-per-allreduce", type=int, default=1, help="number of batches processed locally before the allreduce"
)
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--train-size", type=int, default=2048, help="synthetic training samples")
parser.add_argument("--test-size", type=int, default=512, help="synthetic test samples")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def synthetic_dataset(n, seed):
    """Images whose class is visible in them (a bright row), so the model can learn."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = torch.randn(n, 1, 28, 28, generator=g) * 0.3
    images[torch.arange(n), 0, 2 + 2 * labels, :] += 2.0
    return torch.utils.data.TensorDataset(images, labels)


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        if args.cuda:
            data, target = data.cuda(), target.cuda()
        optimizer.zero_grad()
        # Split data into sub-batches of size batch_size
        for i in range(0, len(data), args.batch_size):
            data_batch = data[i : i + args.batch_size]
            target_batch = target[i : i + args.batch_size]
            output = model(data_batch)
            loss = F.nll_loss(output, target_batch)
            # Average gradients among sub-batches
            loss.div_(-(-len(data) // args.batch_size))
            loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
            print(
                f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_sampler)} ({100.0 * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.6f}"
            )


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def test():
    model.eval()
    test_loss = 0.0
    test_accuracy = 0.0
    with torch.no_grad():
        for data, target in test_loader:
            if args.cuda:
                data, target = data.cuda(), target.cuda()
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.data.max(1, keepdim=True)[1]
            test_accuracy += pred.eq(target.data.view_as(pred)).cpu().float().sum()
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)
    test_loss = metric_average(test_loss, "avg_loss")
    test_accuracy = metric_average(float(test_accuracy), "avg_accuracy")
    if hvd.rank() == 0:
        print(f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {100.0 * test_accuracy:.2f}%\n")
    return test_accuracy


if __name__ == "__main__":
    args = parser.parse_args()
    args.cuda = not args.no_cuda and torch.cuda.is_available()
    allreduce_batch_size = args.batch_size * args.batches_per_allreduce

    hvd.init()
    torch.manual_seed(args.seed)
    if args.cuda:
        torch.cuda.set_device(hvd.local_rank())
        torch.cuda.manual_seed(args.seed)
    # Horovod: limit # of CPU threads to be used per worker.
    torch.set_num_threads(max(1, torch.get_num_threads() // hvd.local_size()))

    train_dataset = synthetic_dataset(args.train_size, 1)
    test_dataset = synthetic_dataset(args.test_size, 2)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank()
    )
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=allreduce_batch_size, sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank()
    )
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)

    model = Net()
    # By default, Adasum doesn't need scaling up learning rate.
    lr_scaler = args.batches_per_allreduce * hvd.size()
    if args.cuda:
        model.cuda()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)

    # Horovod: broadcast parameters & optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # Horovod: (optional) compression algorithm.
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # Horovod: wrap optimizer with DistributedOptimizer.
    optimizer = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=compression,
        backward_passes_per_step=args.batches_per_allreduce,
        op=hvd.Average,
        gradient_predivide_factor=args.gradient_predivide_factor,
    )

    for epoch in range(1, args.epochs + 1):
        train(epoch)
        accuracy = test()
    if hvd.rank() == 0:
        print(f"done: final accuracy {100.0 * accuracy:.2f}% on {hvd.size()} ranks")
