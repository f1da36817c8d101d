"""GPU tensors without a GPU: the pure parts of issue 33, and what happens where CUDA is absent.

- the staging pipeline (csrc/runtime/staging.h) over fake copies whose two streams run their
  queued copies as late as the waits allow or at once: every slot is downloaded before it is
  reduced, uploaded after, and reused only after its upload (a wrong order gives a wrong
  result in one of the two modes);
- the chunk plan;
- __cuda_array_interface__ dictionaries, DLPack capsules and device types (rdmacoll/_device.py,
  _dlpack.py);
- the doctor's GPU path decision;
- where no GPU is (CI): the runtime loader reports why instead of raising, and a CUDA
  array reaches no collective (an object claiming CUDA memory is refused with the reason);
- every GPU code path in real processes over a fake CUDA runtime
  (csrc/python/testing/fake_cuda/, workers/fake_gpu.py): collectives, join, a failed copy.
The GPU itself is checked by scripts/gpu_check.sh on a machine that has one (docs/gpu.md).
"""

import os

import numpy as np
import pytest

import _rdmacoll_testing as _testing
from mpi_util import rank_records, run_mpi
from rdmacoll import RdmacollValueError, _core, _device
from rdmacoll.doctor import gpu_path


# --------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("nbytes", [0, 4, 12, 16, 17 * 4, 4096 * 3 + 8])
@pytest.mark.parametrize("chunk,slots", [(16, 1), (16, 3), (64, 2), (4096, 4), (1 << 20, 16)])
def test_plan_tiles_the_message_in_whole_elements(nbytes, chunk, slots):
    plan = _testing.staging_plan(nbytes, 4, chunk, slots)
    assert plan[0][0] == 0 and sum(b for _, b, _ in plan) == nbytes
    assert all(off == prev_off + prev_b for (prev_off, prev_b, _), (off, _, _) in zip(plan, plan[1:]))
    assert all(b % 4 == 0 and 0 < b <= chunk for _, b, _ in plan) or nbytes == 0
    assert [s for _, _, s in plan] == [j % slots for j in range(len(plan))]
    assert len(plan) == max(1, -(-nbytes // chunk))  # (one empty chunk: the ranks still meet)


def test_plan_rounds_the_chunk_down_to_whole_elements():
    assert [b for _, b, _ in _testing.staging_plan(40, 8, 12, 4)] == [8] * 5
    assert [b for _, b, _ in _testing.staging_plan(6, 8, 4, 4)] == [6]  # (at least one element)


# --------------------------------------------------------------------------- the pipeline


@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
@pytest.mark.parametrize(
    "n,chunk,slots", [(0, 16, 2), (1, 16, 2), (5, 16, 2), (40, 16, 2), (1000, 64, 3), (999, 4096, 1)]
)
def test_allreduce_pipeline_gives_every_chunk_back_reduced(eager, n, chunk, slots):
    x = np.arange(n, dtype=np.float32) + 1
    out = np.zeros_like(x)
    seen = []

    def collective(v):  # the host collective: in place on the slot (here: two equal ranks' sum)
        seen.append(v.copy())
        v *= 2

    log = _testing.staging_run(x, out, chunk, slots, True, True, eager, collective)
    np.testing.assert_array_equal(out, 2 * x)
    np.testing.assert_array_equal(np.concatenate(seen) if seen else x, x)  # each chunk once, in order
    assert log[0] == "begin" and log[-1] == "finish"
    k = max(1, -(-n * 4 // chunk))
    assert log.count("finish") == 1 and sum(e.startswith("up ") for e in log) == k
    assert sum(e.startswith("wait down") for e in log) == k  # the CPU waits once per chunk, for its download
    # downloads run ahead by at most the ring: the first `slots` before any collective
    first_wait = log.index("wait down 0")
    assert sum(e.startswith("down ") for e in log[:first_wait]) == min(slots, k)


@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
def test_broadcast_root_in_place_downloads_only(eager):
    x = np.arange(100, dtype=np.float32)
    out = np.full_like(x, -1)
    seen = []
    log = _testing.staging_run(x, out, 64, 2, True, False, eager, lambda v: seen.append(v.copy()))
    np.testing.assert_array_equal(np.concatenate(seen), x)
    assert not any(e.startswith("up ") for e in log) and (out == -1).all()


@pytest.mark.parametrize("eager", [False, True], ids=["lazy", "eager"])
def test_broadcast_receiver_waits_for_the_slots_upload_before_reusing_it(eager):
    x = np.zeros(100, dtype=np.float32)
    out = np.zeros_like(x)
    chunks = iter(range(100))

    def receive(v):  # the root's bytes arrive in the slot
        v[:] = next(chunks) + np.arange(v.size) / 1000

    log = _testing.staging_run(x, out, 64, 2, False, True, eager, receive)
    assert not any(e.startswith("down ") for e in log)
    assert sum(e.startswith("wait up") for e in log) == 7  # each of the 7 chunks: its slot free first
    want = np.concatenate([j + np.arange(16 if j < 6 else 4) / 1000 for j in range(7)]).astype(np.float32)
    np.testing.assert_array_equal(out, want)


# --------------------------------------------------------------------------- arrays


def _cai(shape=(4, 3), typestr="<f4", ptr=0x7F0000000000, strides=None, version=3, stream=None, **more):
    d = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": version, "strides": strides}
    if version >= 3:
        d["stream"] = stream
    d.update(more)
    return d


def test_interface_describes_contiguous_cuda_memory():
    d = _device.from_interface(_cai(stream=1))
    assert (d.ptr, d.shape, d.dtype, d.size, d.nbytes, d.stream) == (0x7F0000000000, (4, 3), np.float32, 12, 48, 1)
    assert d.code == _core.DTYPES["float32"]
    # explicit contiguous strides, and strides of length-1 dimensions, are contiguous too
    assert _device.from_interface(_cai(strides=(12, 4))).shape == (4, 3)
    assert _device.from_interface(_cai(shape=(4, 1), strides=(4, 999))).shape == (4, 1)
    # version 2 has no stream: the default stream (0); stream None: no synchronisation needed
    assert _device.from_interface(_cai(version=2)).stream == 0
    assert _device.from_interface(_cai(stream=None)).stream == 0
    assert _device.from_interface(_cai(stream=0xABC)).stream == 0xABC
    for typestr, name in [("<f2", "float16"), ("<f8", "float64"), ("<i8", "int64"), ("|u1", "uint8"), ("|b1", "bool")]:
        assert _device.from_interface(_cai(typestr=typestr)).dtype.name == name


@pytest.mark.parametrize(
    "cai,words",
    [
        (_cai(strides=(4, 16)), "not C-contiguous"),
        (_cai(typestr=">f4"), "non-native byte order"),
        (_cai(stream=0), "stream 0 is disallowed"),
        (_cai(mask=(1, 2)), "masked"),
        (_cai(ptr=0), "null pointer"),
        (_cai(typestr="<c8"), "unsupported dtype"),
        ({"shape": (3,)}, "malformed"),
    ],
)
def test_interface_refusals_say_why(cai, words):
    with pytest.raises(RdmacollValueError, match=words):
        _device.from_interface(cai)


def _fake_capsule(ptr, shape, code_bits=(2, 32), device=(2, 1), strides=None, byte_offset=0):
    """A "dltensor" capsule built by hand (what a CUDA producer's __dlpack__ returns), and
    what keeps its memory alive."""
    import ctypes

    from rdmacoll import _dlpack

    dims = (ctypes.c_int64 * len(shape))(*shape)
    st = (ctypes.c_int64 * len(shape))(*strides) if strides is not None else None
    m = _dlpack._Managed()
    m.dl_tensor.data = ptr
    m.dl_tensor.device.device_type, m.dl_tensor.device.device_id = device
    m.dl_tensor.ndim = len(shape)
    m.dl_tensor.dtype.code, m.dl_tensor.dtype.bits = code_bits
    m.dl_tensor.dtype.lanes = 1
    m.dl_tensor.shape = dims
    m.dl_tensor.strides = st
    m.dl_tensor.byte_offset = byte_offset
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), b"dltensor", None), (m, dims, st)


class _Dlpack:
    def __init__(self, kind):
        self.kind = kind
        self.capsule, self.keep = _fake_capsule(0x20000, (3, 4), device=(kind, 0))
        self.streams = []

    def __dlpack_device__(self):
        return (self.kind, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.capsule


def test_dlpack_capsule_of_host_memory_is_read_as_numpy_describes_it():
    from rdmacoll import _dlpack

    a = np.arange(24, dtype=np.float32).reshape(4, 6)[1:]
    d = _dlpack.describe(a.__dlpack__())
    assert (d["ptr"], d["shape"], d["dtype"], d["device_type"]) == (a.ctypes.data, (3, 6), "float32", 1)
    assert d["strides"] in (None, (6, 1))
    b = np.zeros((2, 2), np.int16)
    assert _dlpack.describe(b.__dlpack__())["dtype"] == "int16"
    with pytest.raises(RdmacollValueError, match="not a DLPack capsule"):
        _dlpack.describe(object())
    with pytest.raises(RdmacollValueError, match="takes capsules of CUDA memory"):
        _device.from_object(b.__dlpack__())  # a bare capsule of host memory


def test_dlpack_cuda_producers_and_capsules_become_device_arrays():
    assert _device.from_object(np.zeros(3)) is None  # host memory: the core views it
    assert _device.from_object(_Dlpack(_device.DLPACK_CPU)) is None
    for kind in _device.DLPACK_CUDA_TYPES:
        x = _Dlpack(kind)
        d = _device.from_object(x)
        assert (d.ptr, d.shape, d.dtype, d.device, d.owner) == (0x20000, (3, 4), np.float32, 0, x)
        assert x.streams == [1]  # asked for the legacy default stream
    cap, keep = _fake_capsule(0x30000, (5,), code_bits=(4, 16), device=(2, 3), byte_offset=8)
    d = _device.from_object(cap)
    assert (d.ptr, d.shape, d.dtype.name, d.device, d.owner) == (0x30008, (5,), "bfloat16", 3, None)
    with pytest.raises(RdmacollValueError, match="result of a DLPack capsule"):
        d.new((5,))  # (no library to make results with: out= is the way)
    cap, keep = _fake_capsule(0x30000, (2, 3), strides=(1, 2))
    with pytest.raises(RdmacollValueError, match="not C-contiguous"):
        _device.from_object(cap)
    cap, keep = _fake_capsule(0x30000, (4,), code_bits=(1, 16))  # moved, never reduced
    assert _device.from_object(cap).dtype.name == "uint16"
    cap, keep = _fake_capsule(0x30000, (2,), code_bits=(5, 64))  # complex
    with pytest.raises(RdmacollValueError, match="is not one rdmacoll takes"):
        _device.from_object(cap)


# --------------------------------------------------------------------------- no GPU here


def test_doctor_gpu_path_decisions():
    none = {"error": "no CUDA runtime could be loaded (...)"}
    assert gpu_path(none, True, True)[0] == "none"
    assert gpu_path({"library": "libcudart.so.13", "devices": 0}, True, True)[0] == "none"
    gpu = {"library": "libcudart.so.13", "devices": 1}
    path, why = gpu_path(gpu, False, False)
    assert path == "staging" and "no RDMA device" in why
    path, why = gpu_path(gpu, True, True)
    assert path == "staging" and "nvidia_peermem is loaded" in why and "does not register" in why
    path, why = gpu_path(gpu, True, False)
    assert path == "staging" and "no nvidia_peermem" in why


def test_runtime_loader_reports_instead_of_raising():
    info = _core.cuda_runtime()
    assert ("library" in info) or ("error" in info)
    if not info.get("devices"):
        assert info.get("error")  # why there is none: no library, no driver or no device


FAKE_CUDA = """
import rdmacoll as rc
class FakeCuda:  # claims CUDA memory at an address no GPU owns
    __cuda_array_interface__ = {"shape": (8,), "typestr": "<f4", "data": (0x10000, False), "version": 2}
rc.init()
for call in (lambda x: rc.allreduce(x), lambda x: rc.broadcast(x, 0), lambda x: rc.allgather(x)):
    try:
        call(FakeCuda())
    except rc.RdmacollError as e:
        print("REFUSED", type(e).__name__, e)
    else:
        print("ACCEPTED")
rc.shutdown()
"""


def test_claimed_cuda_memory_is_refused_with_the_reason(tmp_path):
    """Without a GPU (or at an address no GPU owns) a collective refuses before it
    communicates, saying why: no CUDA runtime, or not device memory. One rank is enough
    (nothing reaches a peer)."""
    import subprocess
    import sys

    # (cwd: not the source tree, whose rdmacoll/ has no compiled core in an installed run)
    r = subprocess.run([sys.executable, "-c", FAKE_CUDA], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    lines = [line for line in r.stdout.splitlines() if line.startswith(("REFUSED", "ACCEPTED"))]
    assert r.returncode == 0 and len(lines) == 3, r.stdout + r.stderr
    for line in lines:
        assert line.startswith("REFUSED") and (
            "no CUDA runtime could be loaded" in line or "not CUDA device memory" in line
        ), line


RUNTIME_TOO_LATE = """
from rdmacoll import _core
first = _core.cuda_runtime()
print("FIRST", first.get("library", ""))
if first.get("library"):
    print("SAME", _core.cuda_runtime(first["library"]).get("library", ""))
later = _core.cuda_runtime("/nonexistent/libcudart.so.99")
print("LATER", later.get("error", ""))
"""


def test_a_cuda_runtime_named_after_the_first_gpu_call_is_refused_with_the_reason(tmp_path):
    """One runtime per process: once one is loaded, naming another is an error saying so
    (naming the same one is fine); while none could be loaded, the one named is tried."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", RUNTIME_TOO_LATE], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert "/nonexistent/libcudart.so.99" in out["LATER"], r.stdout
    if out["FIRST"].strip():  # a runtime loaded (a host with CUDA's libraries)
        assert out["SAME"] == out["FIRST"] and "comes too late" in out["LATER"], r.stdout
    else:  # none: the named one was tried, and its failure said
        assert "no CUDA runtime could be loaded" in out["LATER"], r.stdout


# --------------------------------------------------------------------------- a fake GPU, real processes


def _fake_runtime():
    """The fake CUDA runtime built beside the test hooks (csrc/python/testing/fake_cuda/)."""
    path = os.path.join(os.path.dirname(_testing.__file__), "libfake_cudart.so")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: the test hooks' build makes it (RDMACOLL_TESTING)")
    return path


def _fake_env():
    return {
        "RDMACOLL_CUDA_RUNTIME": _fake_runtime(),
        "RDMACOLL_CUDA_CHUNK_BYTES": "4K",
        "RDMACOLL_CUDA_STAGING_BYTES": "16K",
    }


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_gpu_path_over_a_fake_runtime(nranks):
    """Every collective on (fake) GPU arrays in real processes: results against NumPy, one
    download and one upload per chunk, ring wrap, out=, async, the whole-staged
    collectives, refusals."""
    res = run_mpi(nranks, "fake_gpu.py", ["ops"], env=_fake_env(), timeout=120)
    for r, rec in rank_records(res, nranks, "done").items():
        res.check(not rec["bad"], f"rank {r}: {rec['bad'][:6]}")
        res.check(rec["pinned"], f"rank {r}: the staging ring was not page-locked")


def test_a_joined_rank_stands_in_for_gpu_allreduces_chunk_by_chunk():
    res = run_mpi(3, "fake_gpu.py", ["join"], env=_fake_env(), timeout=120)
    for r, rec in rank_records(res, 3, "done").items():
        res.check(not rec["bad"], f"rank {r}: {rec['bad']}")
        res.check(rec["last"] in (0, 1), f"rank {r}: join() returned {rec['last']}")


def test_a_failed_copy_mid_message_raises_on_every_rank():
    res = run_mpi(2, "fake_gpu.py", ["fail"], env={**_fake_env(), "RDMACOLL_TIMEOUT": "30"}, timeout=90)
    recs = rank_records(res, 2, "done")
    res.check(recs[0]["error"] and "fake CUDA error" in recs[0]["error"], f"rank 0: {recs[0]['error']!r}")
    # rank 1 learns rank 0's error from its abort (not from its own timeout, 30 s later)
    res.check(
        recs[1]["error"] and "fake CUDA error" in recs[1]["error"] and "rank 0" in recs[1]["error"],
        f"rank 1: {recs[1]['error']!r}",
    )
