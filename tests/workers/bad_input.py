"""Bad input gets an RdmacollError that is also a ValueError (RdmacollValueError, what
Horovod raises for bad arguments), never a crash, a hang or a silently wrong result.

Every check is local (validation happens before any message), so ranks stay in step; the
communicator must still work afterwards. Records: one "check" per bad call (its error
text, or None when nothing was raised), "memory" (a 4 TiB rc.empty), then "byteorder" (a big-endian array is refused or reduced
correctly), "after" (valid calls still work), then
"shutdown" (what happens once the communicator is gone).
"""

import numpy as np

from common import emit, init, main, raises


def bad_calls(rc, p):
    x = np.arange(64, dtype=np.float32)
    ints = np.arange(64, dtype=np.int32)
    base = np.zeros(100, dtype=np.float32)
    return {
        # name: (call, words the message must contain)
        "dtype complex64": (lambda: rc.allreduce(x.astype(np.complex64)), ["unsupported dtype", "complex64"]),
        # (before: pybind's TypeError, "Unable to cast", UnicodeEncodeError)
        "op a str": (lambda: rc.allreduce(x, op="Sum"), ["unknown op 'Sum'", "rdmacoll.Sum"]),
        "op a float": (lambda: rc.reducescatter(x, op=1.0), ["unknown op 1.0"]),
        "splits floats": (lambda: rc.alltoall(x, splits=[64 / p] * p), ["splits must be integers"]),
        "name not UTF-8": (lambda: rc.allreduce(x, name="bad\udc80"), ["cannot be encoded as UTF-8"]),
        "dtype bool": (lambda: rc.allreduce(x > 3), ["bool", "cannot be reduced"]),
        "dtype uint16": (lambda: rc.allreduce(ints.astype(np.uint16), op=rc.Sum), ["uint16", "cannot be reduced"]),
        "non-contiguous input": (lambda: rc.allreduce(x[::2]), ["contiguous"]),
        "non-contiguous out": (lambda: rc.allreduce(x[:32], out=np.empty(64, np.float32)[::2]), ["contiguous"]),
        "out wrong shape": (lambda: rc.allreduce(x, out=np.empty(63, np.float32)), ["shape"]),
        "out wrong 2-D shape": (lambda: rc.allreduce(x, out=np.empty((8, 8), np.float32)), ["shape"]),
        "out wrong dtype": (lambda: rc.allreduce(x, out=np.empty(64, np.float64)), ["dtype"]),
        "out read-only": (lambda: rc.allreduce(x, out=np.frombuffer(bytes(256), np.float32)), ["read-only"]),
        "out partially overlaps input": (lambda: rc.allreduce(base[:60], out=base[40:]), ["overlap"]),
        "unknown op": (lambda: rc.allreduce(x, op=99), ["op"]),
        "reducescatter on bool": (lambda: rc.reducescatter(x > 3, op=rc.Sum), ["bool", "cannot be reduced"]),
        "input not an array": (lambda: rc.allreduce([1.0, 2.0]), ["array"]),
        "empty unsupported dtype": (lambda: rc.empty(8, "complex64"), ["unsupported dtype"]),
        "empty negative dimension": (lambda: rc.empty((-1, 4), "float32"), ["negative"]),
        "broadcast root out of range": (lambda: rc.broadcast(x, p + 2), ["root_rank", "not a rank"]),
        "alltoall splits sum": (lambda: rc.alltoall(x, splits=[65] + [0] * (p - 1)), ["splits sum to 65"]),
        "alltoall splits length": (lambda: rc.alltoall(x, splits=[64] * (p + 1)), ["entries"]),
        "alltoall negative split": (
            lambda: rc.alltoall(x, splits=[-1] + [65] + [0] * (p - 2) if p > 1 else [-1]),
            ["negative split"],
        ),
        "name not a str": (lambda: rc.allreduce(x, name=5), ["name"]),
    }


def body():
    rc = init()
    p = rc.size()
    for name, (call, words) in bad_calls(rc, p).items():
        try:
            call()
            error, value_error = None, None
        except rc.RdmacollError as e:
            error, value_error = str(e), isinstance(e, ValueError)
        emit("check", name=name, error=error, words=words, value_error=value_error)

    # More memory than the machine has: MemoryError before any is faulted in (before: the
    # kernel's out-of-memory killer took every rank); the job goes on.
    try:
        rc.empty((2**40,), "float32")  # 4 TiB
        types = error = None
    except rc.RdmacollError as e:
        types, error = [c.__name__ for c in type(e).__mro__], str(e)
    emit("memory", types=types, error=error, after=float(rc.allreduce(np.array(1.0), op=rc.Sum)))

    # Non-native byte order: refused, or reduced correctly; never reduced as native bytes.
    swapped = np.arange(1, 65, dtype=">f4")
    try:
        res = rc.allreduce(swapped, op=rc.Sum)
    except rc.RdmacollError as e:
        emit("byteorder", error=str(e), correct=None)
    else:
        emit("byteorder", error=None, correct=bool(np.array_equal(np.asarray(res, np.float64), swapped * p)))

    # Still usable, results right, including inputs that are valid but unusual.
    x = np.full(1000, 1.5, dtype=np.float32)
    ro = x.copy()
    ro.setflags(write=False)
    problems = []
    if not np.array_equal(rc.allreduce(x, op=rc.Sum), np.full(1000, 1.5 * p, np.float32)):
        problems.append("Sum after the bad calls is wrong")
    if not np.array_equal(rc.allreduce(ro, op=rc.Max), ro):
        problems.append("read-only input gave a wrong result")
    if float(rc.allreduce(np.array(2.0), op=rc.Sum)) != 2.0 * p:
        problems.append("0-d array gave a wrong result")
    if not np.array_equal(rc.allreduce(memoryview(np.arange(5, dtype=np.int64)), op=rc.Sum), np.arange(5) * p):
        problems.append("memoryview input gave a wrong result")
    emit("after", problems=problems)

    kept = rc.empty(1000, "float32")
    kept[:] = 7
    rc.shutdown()
    emit(
        "shutdown",
        initialized=rc.is_initialized(),
        allreduce=raises(rc.allreduce, x),
        empty=raises(rc.empty, 4),
        rank_call=raises(rc.rank),
        kept_array_readable=bool((kept == 7).all()),
    )


main(body)
