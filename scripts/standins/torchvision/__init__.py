# Stand-in for torchvision in the Horovod example runs: PyPI's only torchvision wheels for
# torch 2.13.0 link libtorch_cuda, which the CPU torch wheel lacks, so torchvision cannot be
# imported here. models.resnet50 (ResNet-50 v1.5, 25.6M parameters, as torchvision's) and an
# MNIST-shaped random dataset (no download: no network).
from . import datasets, models, transforms  # noqa: F401
