"""Hostile bytes where the core reads what peers send: packed memory descriptors, call
headers, descriptors, bootstrap address blobs. Random and mutated cases from a fixed seed
(argv[1]); argv[2] scales the number of cases. Runs in its own process so that a crash
is a test failure, not a dead pytest. Records: one "target" per fuzz target with the
outcome counts, samples, and the outcome of the unmutated templates."""

import collections
import random
import struct
import sys

from common import emit, main

INTERESTING64 = [
    0,
    1,
    7,
    8,
    63,
    64,
    4095,
    4096,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    (1 << 48),
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 8,
    (1 << 64) - 1,
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(7)
        if kind == 0 and b:  # flip a bit
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1 and b:  # an interesting byte
            b[rng.randrange(len(b))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
        elif kind == 2 and len(b) >= 8:  # an interesting 64-bit field (aligned)
            i = rng.randrange(len(b) // 8) * 8
            b[i : i + 8] = struct.pack("<Q", rng.choice(INTERESTING64))
        elif kind == 3 and len(b) >= 4:  # an interesting 32-bit field
            i = rng.randrange(len(b) // 4) * 4
            b[i : i + 4] = struct.pack("<I", rng.choice(INTERESTING64) & 0xFFFFFFFF)
        elif kind == 4 and b:  # truncate
            del b[rng.randrange(len(b)) :]
        elif kind == 5:  # extend
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif b:  # random span
            i = rng.randrange(len(b))
            n = rng.randint(1, 16)
            b[i : i + n] = bytes(rng.randrange(256) for _ in range(min(n, len(b) - i)))
    return bytes(b)


def summarize(name, results, templates_ok, cases):
    kinds = collections.Counter()
    bad = []
    samples = {}
    for r in results:
        if r == "ok":
            kinds["ok"] += 1
        elif r.startswith("error: "):
            key = r[7:47]
            kinds["error"] += 1
            samples.setdefault(key, r[7:200])
        else:
            bad.append(r)
    emit(
        "target",
        target=name,
        cases=cases,
        results=len(results),
        ok=kinds["ok"],
        errors=kinds["error"],
        bad=bad[:5],
        samples=list(samples.values())[:8],
        templates_ok=templates_ok,
    )


def body():
    seed, scale = int(sys.argv[1]), float(sys.argv[2])
    rng = random.Random(seed)
    from rdmacoll import _core
    import _rdmacoll_testing as _testing

    n = lambda k: max(10, int(k * scale))  # noqa: E731

    # ---- packed memory (Endpoint::unpack, map, read)
    pair = _testing.FuzzPair()
    templates = pair.templates()
    ok = pair.unpack(templates)
    cases = [bytes(rng.randrange(256) for _ in range(_testing.PACKED_MEMORY_BYTES)) for _ in range(n(500))]
    cases += [mutate(rng, rng.choice(templates)) for _ in range(n(2500))]
    summarize("unpack", pair.unpack(cases), ok, len(cases))

    # ---- call headers as a peer writes them (descriptor check, viewPeer, bounded reads)
    H = _testing.CALL_HEADER_BYTES
    spans = [(0, 64), (4096 - 8, 8), (8192 - 1, 1), (1 << 40, 8), (0, 1 << 20), ((1 << 64) - 4, 8)]
    rand_headers = [bytes(rng.randrange(256) for _ in range(H)) for _ in range(n(500))]
    res = pair.headers(rand_headers, False, spans)

    def valid_header(i, o):
        # hash + descriptor (64 bytes, replaced by the hook), in, out, inOffset, outOffset, extra
        return bytes(64) + templates[i] + templates[o] + struct.pack("<QQQQ", 0, 0, 0, 0) + bytes(H - 64 - 80 - 32)

    valid = [valid_header(i, o) for i in range(len(templates)) for o in range(len(templates))]
    ok_headers = pair.headers(valid, True, [(0, 8)])
    mutated = [mutate(rng, rng.choice(valid)) for _ in range(n(2500))]
    res += pair.headers(mutated, True, spans)
    summarize("headers", res, ok_headers, len(rand_headers) + len(mutated))

    # ---- descriptors alone (the mismatch check and its message)
    D = _testing.DESCRIPTOR_BYTES
    cases = [bytes(rng.randrange(256) for _ in range(D)) for _ in range(n(1500))]
    # The descriptor the hook compares with: allreduce #1 of 10 float16, Sum, no root, "grad.w".
    desc = struct.pack("<BBBBiQQQII16s", 1, 0, 0, 0, -1, 1, 10, 0, 0, 0, b"grad.w")
    base = struct.pack("<Q", _testing.hash_descriptor(1, 1, 0, 10, 0, -1, 0, 0, 0, 0)) + desc
    cases += [mutate(rng, base) for _ in range(n(1500))]
    summarize("descriptors", _testing.fuzz_descriptors(cases), None, len(cases))
    del pair

    # ---- bootstrap address blobs (Communicator::connect)
    cfg = dict(segment_bytes=4096, slot_bytes=4096, slots=1, eager_bytes=256, stall_warning=0.0)
    peer = _core.Communicator(1, 2, 2, cfg, {}, {})
    blob = peer.address()

    def connect(b):
        c = _core.Communicator(0, 2, 2, cfg, {}, {})
        try:
            c.connect([c.address(), b])
            return "ok"
        except _core.RdmacollError as e:
            return "error: " + str(e)
        finally:
            c.close()

    ok = [connect(blob)]
    cases = [
        bytes(rng.randrange(256) for _ in range(rng.choice([0, 8, len(blob) - 1, len(blob), len(blob) + 1])))
        for _ in range(n(200))
    ]
    cases += [mutate(rng, blob) for _ in range(n(800))]
    summarize("connect", [connect(b) for b in cases], ok, len(cases))
    peer.close()
    emit("done")


main(body)
