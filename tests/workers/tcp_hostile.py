"""A peer that sends hostile frames over a real tcp connection (2 ranks).

Rank 0 forges the packed descriptor of rank 1's region (a larger length, or another
region id), so that its own bounds check passes and the frame goes out with an offset
outside the real region (or naming no region). Rank 1 must close that connection
(alive() false on both sides), deliver no immediate, and write nothing: its region sits
in the middle of a larger array whose guard bytes are checked. One fresh device pair per
case (a rejected connection stays closed). Records: "result" {name, ok, detail}, "done".

Forging relies on the tcp descriptor's layout (csrc/transport/tcp/device.cc, Packed):
u32 magic, u32 kind, i32 rank, u32 region id (bytes 12..16), u64 length (bytes 16..24).
"""

import struct
import time

import numpy as np
from mpi4py import MPI

from common import emit, ignore_launcher_notifications, main, set_rank
from rdmacoll import _core
import _rdmacoll_testing as _testing

WORLD = MPI.COMM_WORLD
DEADLINE_S = 30
REGION, GUARD = 4096, 4096


def forge(packed: bytes, case: str) -> bytes:
    b = bytearray(packed)
    region_id, length = struct.unpack_from("<IQ", b, 12)
    if case == "length":
        struct.pack_into("<Q", b, 16, length * 4)
    elif case == "region":
        struct.pack_into("<I", b, 12, region_id + 1000)
    return bytes(b)


def run_case(case):
    rank = WORLD.Get_rank()
    probe = _testing.TransportProbe("tcp", rank, 2)
    addresses = WORLD.allgather(probe.address())
    probe.connect(1 - rank, addresses[1 - rank])
    whole = np.zeros(GUARD + REGION + GUARD, np.uint8)
    packed = None
    if rank == 1:
        packed = probe.pack(probe.register(whole[GUARD : GUARD + REGION]))
    packed = WORLD.bcast(packed, root=1)
    detail = ""
    if rank == 0:
        remote = forge(packed, case)
        payload = np.full(REGION, 0xAB, np.uint8)
        try:
            if case == "put64":
                probe.put64(1, forge(packed, "length"), REGION + 8, 0xDEADBEEF)
            else:
                off = REGION + 64 if case == "length" else 0
                probe.write(1, payload, remote, off, 7)
        except _core.RdmacollError as e:
            detail = f"the send itself raised: {e}"
    end = time.monotonic() + DEADLINE_S
    while probe.alive(1 - rank) and time.monotonic() < end:
        time.sleep(0.01)
    closed = not probe.alive(1 - rank)
    ok = closed
    if rank == 1:
        imm = probe.poll(0)
        untouched = not whole.any()
        ok = closed and imm is None and untouched
        detail = f"closed {closed}, immediate {imm}, memory untouched {untouched}"
    elif not closed:
        detail += f" connection still open after {DEADLINE_S} s"
    emit("result", name=case, ok=bool(ok), detail=detail)
    WORLD.Barrier()
    del probe


def body():
    set_rank(WORLD.Get_rank())
    ignore_launcher_notifications()
    assert WORLD.Get_size() == 2, "run with 2 ranks"
    for case in ("length", "region", "put64"):
        run_case(case)
    emit("done")


main(body)
