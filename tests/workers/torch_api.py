"""Every collective of rdmacoll.frameworks.torch against NumPy references, in one launch.

Reports one record "api" with the names of the checks that failed ("bad") and the count
of checks run. Inputs are rank-dependent and reproducible on every rank, so each rank
computes the expected result itself.
"""

import numpy as np
import torch
from common import emit, raises

import rdmacoll.frameworks.torch as hvd


def run():
    """All the checks; reports record "api"."""
    r, p = hvd.rank(), hvd.size()
    bad, ran = [], [0]

    def expect(name, ok):
        ran[0] += 1
        if not ok:
            bad.append(name)

    def data(q, shape, dtype=torch.float32, salt=0):
        g = torch.Generator().manual_seed(1000 * salt + q)
        return (torch.randn(shape, generator=g) * 4).to(dtype)

    def close(a, b, tol=1e-5):
        return a.shape == b.shape and torch.allclose(a.double(), torch.as_tensor(b).double(), rtol=tol, atol=tol)

    expect("rank/size", 0 <= r < p and hvd.local_rank() < hvd.local_size() and hvd.is_initialized())

    # allreduce: every op, dtypes, out of place (input untouched), in place, async
    refs = {hvd.Sum: np.sum, hvd.Average: np.mean, hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}
    for k, (op, ref) in enumerate(refs.items()):
        x = data(r, (5, 7), salt=k)
        keep = x.clone()
        want = ref(np.stack([data(q, (5, 7), salt=k).numpy().astype(np.float64) for q in range(p)]), axis=0)
        got = hvd.allreduce(x, op=op, name=f"op{k}")
        expect(f"allreduce op {k}", close(got, want, 1e-4) and torch.equal(x, keep))
        y = x.clone()
        expect(f"allreduce_ op {k}", hvd.allreduce_(y, op=op) is y and close(y, want, 1e-4))
    expect("average=False is Sum", close(hvd.allreduce(torch.ones(3), average=False), np.full(3, p)))
    for dtype, tol in (
        (torch.float64, 1e-12),
        (torch.float16, 1e-2),
        (torch.bfloat16, 5e-2),
        (torch.int32, 0),
        (torch.int64, 0),
        (torch.uint8, 0),
    ):
        x = (torch.arange(10) % 5 + r).to(dtype)
        want = sum((torch.arange(10) % 5 + q).to(torch.float64) for q in range(p))
        got = hvd.allreduce(x, op=hvd.Sum)
        expect(f"allreduce {dtype}", got.dtype == dtype and close(got, want.numpy(), tol))
    # requires_grad, non-contiguous, 0-d, empty, channels_last
    w = data(r, (4, 6)).requires_grad_()
    expect(
        "requires_grad input",
        close(hvd.allreduce(w, op=hvd.Sum).detach(), sum(data(q, (4, 6)) for q in range(p)).numpy()),
    )
    nc = data(r, (6, 4)).t()
    want_nc = sum(data(q, (6, 4)) for q in range(p)).t()
    expect("non-contiguous out of place", close(hvd.allreduce(nc, op=hvd.Sum), want_nc.numpy()))
    expect("non-contiguous in place", close(hvd.allreduce_(nc, op=hvd.Sum), want_nc.numpy()))
    expect("0-d", close(hvd.allreduce(torch.tensor(float(r)), op=hvd.Sum), np.array(sum(range(p)), np.float64)))
    expect("empty", hvd.allreduce(torch.empty(0, 3)).shape == (0, 3))
    cl = data(r, (2, 3, 4, 5)).contiguous(memory_format=torch.channels_last)
    want_cl = sum(data(q, (2, 3, 4, 5)) for q in range(p))
    expect("channels_last in place", close(hvd.allreduce_(cl, op=hvd.Sum), want_cl.numpy()))
    # scaling, compression
    x = data(r, (64,))
    want = sum(data(q, (64,)) for q in range(p)).numpy()
    expect(
        "prescale/postscale",
        close(hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0), 1.5 * want, 1e-4)
        and torch.equal(x, data(r, (64,))),
    )
    for comp, tol in ((hvd.Compression.none, 1e-5), (hvd.Compression.fp16, 1e-2), (hvd.Compression.bf16, 6e-2)):
        got = hvd.allreduce(x, op=hvd.Sum, compression=comp)
        expect(f"compression {comp.__name__}", got.dtype == torch.float32 and close(got, want, tol * 8))
    # async forms waited in reverse order
    hs = [hvd.allreduce_async(data(r, (100 + i,), salt=i), op=hvd.Sum) for i in range(4)]
    ins = [data(r, (9,), salt=i) for i in range(3)]
    hs_ = [hvd.allreduce_async_(t, op=hvd.Max) for t in ins]
    expect("poll is a bool", all(isinstance(hvd.poll(h), bool) for h in hs + hs_))
    for i, t in reversed(list(enumerate(ins))):
        want_i = np.max(np.stack([data(q, (9,), salt=i).numpy() for q in range(p)]), axis=0)
        expect(f"allreduce_async_ {i}", hvd.synchronize(hs_[i]) is t and close(t, want_i))
    for i, h in reversed(list(enumerate(hs))):
        expect(
            f"allreduce_async {i}",
            close(hvd.synchronize(h), sum(data(q, (100 + i,), salt=i) for q in range(p)).numpy(), 1e-4),
        )
    # grouped
    xs = [data(r, (3,)), (torch.arange(4) + r).to(torch.int64), data(r, (2, 2), torch.float64)]
    wants = [
        sum(data(q, (3,)) for q in range(p)),
        sum(torch.arange(4) + q for q in range(p)),
        sum(data(q, (2, 2), torch.float64) for q in range(p)),
    ]
    got = hvd.grouped_allreduce(xs, op=hvd.Sum)
    expect("grouped_allreduce", all(g.dtype == x.dtype and close(g, w.numpy()) for g, x, w in zip(got, xs, wants)))
    ys = [x.clone() for x in xs]
    got = hvd.grouped_allreduce_(ys, op=hvd.Sum)
    expect("grouped_allreduce_", all(g is y and close(y, w.numpy()) for g, y, w in zip(got, ys, wants)))
    h = hvd.grouped_allreduce_async([data(r, (5,))], op=hvd.Average)
    expect("grouped_allreduce_async", close(hvd.synchronize(h)[0], (sum(data(q, (5,)) for q in range(p)) / p).numpy()))
    # allgather (first dimension differs per rank), bfloat16 included
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        got = hvd.allgather((torch.ones(r + 1, 3) * r).to(dtype))
        want = torch.cat([(torch.ones(q + 1, 3) * q) for q in range(p)])
        expect(f"allgather {dtype}", got.dtype == dtype and close(got, want.numpy()))
    expect("allgather_async", close(hvd.synchronize(hvd.allgather_async(torch.tensor([r]))), np.arange(p)))
    # broadcast from every root, in place and not
    for root in range(p):
        x = data(r, (3, 4))
        got = hvd.broadcast(x, root, name=f"b{root}")
        expect(f"broadcast root {root}", close(got, data(root, (3, 4)).numpy()) and torch.equal(x, data(r, (3, 4))))
        y = data(r, (3, 4)).t()
        expect(f"broadcast_ root {root}", hvd.broadcast_(y, root) is y and close(y, data(root, (3, 4)).t().numpy()))
    # alltoall: even split and explicit splits
    x = torch.arange(2 * p, dtype=torch.float32) + 100 * r
    want = torch.cat([torch.arange(2 * p, dtype=torch.float32)[2 * r : 2 * r + 2] + 100 * q for q in range(p)])
    expect("alltoall even", close(hvd.alltoall(x), want.numpy()))
    splits = [q + 1 for q in range(p)]  # rank q gets q+1 rows from everyone
    x = torch.full((sum(splits), 2), float(r))
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))  # Horovod takes int32 only
    expect(
        "alltoall splits",
        out.shape == (p * (r + 1), 2)
        and received.tolist() == [r + 1] * p
        and close(out, torch.cat([torch.full((r + 1, 2), float(q)) for q in range(p)]).numpy()),
    )
    # reducescatter
    x = data(r, (2 * p + 1, 3))
    full = sum(data(q, (2 * p + 1, 3)) for q in range(p))
    rows = [(2 * p + 1) // p + (1 if q < (2 * p + 1) % p else 0) for q in range(p)]
    start = sum(rows[:r])
    expect("reducescatter", close(hvd.reducescatter(x, op=hvd.Sum), full[start : start + rows[r]].numpy(), 1e-4))
    expect("reducescatter average", close(hvd.reducescatter(x), (full / p)[start : start + rows[r]].numpy(), 1e-4))
    # objects, barrier, join
    expect("broadcast_object", hvd.broadcast_object({"r": r, "t": torch.ones(2) * r}, root_rank=p - 1)["r"] == p - 1)
    expect("allgather_object", hvd.allgather_object(("x", r)) == [("x", q) for q in range(p)])
    hvd.barrier()
    expect("join", 0 <= hvd.join() < p)
    # sparse tensors: sparse_allreduce_async (every rank's entries; allreduce refuses them, as Horovod)
    i = torch.tensor([[r, 0]])
    s = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0]), (p + 1,), check_invariants=True)
    want = np.zeros(p + 1)
    for q in range(p):
        want[q] += 1
        want[0] += 2
    h = hvd.sparse_allreduce_async(s, "sparse", hvd.Sum)
    expect("sparse allreduce", close(hvd.synchronize(h).to_dense(), want) and hvd.poll(h) and h() is not None)
    try:
        hvd.allreduce(s)
        expect("sparse allreduce refused", False)
    except ValueError:
        pass

    # gradients through collectives (Horovod's rules)
    w = data(r, (3, 2)).requires_grad_()
    (hvd.allreduce(w, op=hvd.Sum) * (r + 1)).sum().backward()  # d/dw = sum_q (q+1)
    expect("allreduce gradient", close(w.grad, np.full((3, 2), p * (p + 1) / 2)))
    w = torch.ones(r + 1, 2, requires_grad=True)
    g = hvd.allgather(w)
    expect("allgather forward", g.shape == (p * (p + 1) // 2, 2) and g.requires_grad)
    (g * torch.arange(g.shape[0]).unsqueeze(1)).sum().backward()  # averaged, own rows
    start = r * (r + 1) // 2
    expect(
        "allgather gradient", close(w.grad, torch.arange(start, start + r + 1).unsqueeze(1).expand(r + 1, 2).numpy())
    )
    w = data(r, (4,)).requires_grad_()
    (hvd.broadcast(w, p - 1) * (r + 1)).sum().backward()  # root: mean of (q+1)
    want = np.full(4, (p + 1) / 2 if r == p - 1 else 0.0)
    expect("broadcast gradient", close(w.grad, want))
    ws = [data(r, (3,)).requires_grad_(), data(r, (2, 2)).requires_grad_()]
    outs = hvd.grouped_allreduce(ws, op=hvd.Sum)
    (outs[0] * (r + 1)).sum().backward()  # d/dw0 = sum_q (q+1)
    (outs[1] * 2 * (r + 1)).sum().backward()  # d/dw1 = 2 sum_q (q+1)
    expect(
        "grouped_allreduce gradient",
        all(o.grad_fn is not None for o in outs)
        and close(ws[0].grad, np.full(3, p * (p + 1) / 2))
        and close(ws[1].grad, np.full((2, 2), p * (p + 1))),
    )
    w = torch.arange(2.0 * p).requires_grad_()  # 2 elements to every rank
    out, received = hvd.alltoall(w, splits=[2] * p)
    (out * torch.arange(2.0 * p) * (r + 1)).sum().backward()  # what rank q got from me, weighted by q
    want = np.array([(q + 1) * (2 * r + k) for q in range(p) for k in range(2)], np.float32)
    expect("alltoall gradient", out.grad_fn is not None and received.tolist() == [2] * p and close(w.grad, want))
    w = torch.arange(2.0 * p).requires_grad_()
    out = hvd.alltoall(w)  # even splits: a tensor, as Horovod
    (out * (r + 1)).sum().backward()
    expect(
        "alltoall even gradient",
        isinstance(out, torch.Tensor) and close(w.grad, np.repeat([q + 1.0 for q in range(p)], 2)),
    )
    for op, scale in ((hvd.Sum, p), (hvd.Average, 1)):  # Horovod: Sum's gradient times size
        w = data(r, (p, 2)).requires_grad_()
        out = hvd.reducescatter(w, op=op, prescale_factor=2.0)
        (out * (r + 1)).sum().backward()
        want = np.repeat(np.array([[q + 1.0] for q in range(p)]), 2, axis=1) * scale * 2.0
        expect(f"reducescatter {op} gradient", out.grad_fn is not None and close(w.grad, want))

    # errors: clear RdmacollError, same on every rank, communicator still usable after
    meta = torch.empty(3, device="meta")
    e = raises(hvd.allreduce, meta)
    expect("non-CPU tensor", e is not None and "takes CPU and CUDA tensors" in e)
    e = raises(hvd.allreduce, torch.ones(2, dtype=torch.complex64))
    expect("complex dtype", e is not None and "dtype" in e)
    try:  # Adasum of equal tensors is that tensor; Horovod refuses sizes that are not powers of two
        expect("Adasum", close(hvd.allreduce(torch.ones(2), op=hvd.Adasum), np.ones(2)) and not p & (p - 1))
    except NotImplementedError as e:
        expect("Adasum refused", p & (p - 1) and "power of 2" in str(e))
    e = raises(hvd.allreduce, [1.0, 2.0])
    expect("not a tensor", e is not None and "torch.Tensor" in e)
    expect("usable after errors", close(hvd.allreduce(torch.ones(2), op=hvd.Sum), np.full(2, p)))
    emit("api", bad=bad, checks=ran[0])
