"""torch's plugin hook for rdmacoll: `init_process_group("rdmacoll")` works without first
importing rdmacoll.frameworks.torch.distributed.

torch calls register() at the end of `import torch` (entry point group "torch.backends",
pyproject.toml; torch/__init__.py _import_device_backends; TORCH_DEVICE_BACKEND_AUTOLOAD=0
turns it off). It is a package of its own so that `import torch` imports nothing of
rdmacoll (NumPy, the core): it registers a creator, and the first process group of the
backend imports the backend's module (which then finds the name taken and keeps this
creator). It never raises: torch would turn any error into a failed `import torch`.
"""

BACKEND = "rdmacoll"


def _create(opts, backend_options=None):
    from rdmacoll.frameworks.torch import distributed  # the backend itself

    return distributed._create(opts, backend_options)


def register():
    try:
        import torch.distributed as dist

        if dist.is_available() and BACKEND.upper() not in getattr(dist.Backend, "_plugins", {}):
            dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])
    except Exception:  # noqa: BLE001 - see the module docstring; importing the backend says why
        pass
