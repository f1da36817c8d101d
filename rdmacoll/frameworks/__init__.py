"""Framework adapters: the only place PyTorch and TensorFlow are imported.

    import rdmacoll.frameworks.torch as hvd        # Horovod's torch API
    import rdmacoll.frameworks.tensorflow as hvd   # Horovod's tensorflow / keras API

Each is pure Python over rdmacoll's core; nothing is compiled against a framework.
"""
