"""hvd.SyncBatchNorm on CPU against torch.nn.BatchNorm1d/2d on the union of every rank's
batch (batch sizes and means differ per rank): outputs, input gradients, running
statistics (momentum 0.1 and None) and the weight gradients summed over ranks, over two
training steps, then eval mode. Records: "check" {name, ok, detail}; "done"."""

import torch

import rdmacoll.frameworks.torch as hvd
from common import emit, main, set_rank


def run():
    hvd.init()
    r, p = hvd.rank(), hvd.size()
    set_rank(r)
    torch.manual_seed(0)
    for layer, shape in ((torch.nn.BatchNorm1d, (4, 5)), (torch.nn.BatchNorm2d, (4, 3, 2))):
        xs = [torch.randn(3 + q, *shape) * (q + 1) + 10 * q for q in range(p)]
        ws = [torch.randn(3 + q, *shape) for q in range(p)]
        for momentum in (0.1, None):
            sync, plain = hvd.SyncBatchNorm(4, momentum=momentum), layer(4, momentum=momentum)
            with torch.no_grad():
                for m in (sync, plain):
                    m.weight.copy_(torch.arange(4.0) + 1)
                    m.bias.copy_(torch.arange(4.0) * 0.5)
            x, ux = xs[r].clone().requires_grad_(True), torch.cat(xs).requires_grad_(True)
            for _ in range(2):
                for m, inp, w in ((sync, x, ws[r]), (plain, ux, torch.cat(ws))):
                    inp.grad, m.weight.grad = None, None
                    out = m(inp)
                    (w * out).sum().backward()
                    if m is sync:
                        y = out
                    else:
                        uy = out
            start = sum(3 + q for q in range(r))
            mine = slice(start, start + 3 + r)
            name = f"{layer.__name__} momentum={momentum}"
            got = {
                "output": (y, uy[mine]),
                "input gradient": (x.grad, ux.grad[mine]),
                "running mean": (sync.running_mean, plain.running_mean),
                "running var": (sync.running_var, plain.running_var),
                "weight gradient summed": (hvd.allreduce(sync.weight.grad, op=hvd.Sum), plain.weight.grad),
                "bias gradient summed": (hvd.allreduce(sync.bias.grad, op=hvd.Sum), plain.bias.grad),
            }
            sync.eval()
            plain.eval()
            got["eval output"] = (sync(xs[r]), plain(xs[r]))
            for what, (a, b) in got.items():
                err = float((a.detach() - b.detach()).abs().max())
                emit("check", name=f"{name} {what}", ok=err < 1e-3 * (1 + float(b.abs().max())), detail=f"{err:.3g}")
    try:
        hvd.SyncBatchNorm(4)(torch.zeros(4))
        emit("check", name="1-D input refused", ok=False, detail="accepted")
    except ValueError as e:
        emit("check", name="1-D input refused", ok="expected at least 2D input" in str(e), detail=str(e))
    emit("done")
    hvd.shutdown()


if __name__ == "__main__":
    main(run)
