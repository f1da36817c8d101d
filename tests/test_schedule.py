"""Rank arithmetic of recursive doubling, halving-doubling and the double binary tree
(csrc/algorithms/schedule.h), for p = 1..64, without any transport."""

import pytest

import _rdmacoll_testing as _testing

RANKS = range(1, 65)
COUNTS = [0, 1, 2, 3, 7, 63, 64, 65, 1023, 2**20 + 3]


def participants(p):
    """Original ranks that take part in the power-of-two phase, by new rank."""
    P = _testing.pow2_floor(p)
    return [_testing.fold_old_rank(n, p) for n in range(P)]


@pytest.mark.parametrize("p", RANKS)
def test_fold(p):
    P = _testing.pow2_floor(p)
    assert P <= p < 2 * P and P & (P - 1) == 0
    rem = p - P
    olds = participants(p)
    assert len(set(olds)) == P and all(0 <= o < p for o in olds)
    assert olds == sorted(olds), "new ranks keep the original order"
    for r in range(p):
        partner, away, new = _testing.fold_partner(r, p), _testing.folded_away(r, p), _testing.fold_new_rank(r, p)
        if r < 2 * rem:
            assert partner == r ^ 1 and _testing.fold_partner(partner, p) == r
            assert away == (r % 2 == 0)
        else:
            assert partner == -1 and not away
        if away:
            assert new == -1 and r not in olds
        else:
            assert 0 <= new < P and _testing.fold_old_rank(new, p) == r
    # every folded-away rank hands over to a participant
    assert sum(_testing.folded_away(r, p) for r in range(p)) == rem


@pytest.mark.parametrize("p", RANKS)
def test_recursive_doubling(p):
    steps = _testing.rd_steps(p)
    P = _testing.pow2_floor(p)
    assert 1 << steps == P
    olds = participants(p)
    for r in range(p):
        for s in range(steps):
            q = _testing.rd_partner(r, p, s)
            if _testing.folded_away(r, p):
                assert q == -1
                continue
            assert q in olds and q != r
            assert _testing.rd_partner(q, p, s) == r, "the partner's partner is the rank itself"
    # Simulate: each participant's set of contributing ranks doubles and ends with all.
    have = {r: {r} for r in range(p)}
    for r in range(p):
        if _testing.folded_away(r, p):
            have[_testing.fold_partner(r, p)] |= have[r]
    for s in range(steps):
        new = {}
        for r in olds:
            q = _testing.rd_partner(r, p, s)
            assert not (have[r] & have[q]), f"rank {r} would reduce a contribution twice (p={p}, step {s})"
            new[r] = have[r] | have[q]
        have.update(new)
    for r in olds:
        assert have[r] == set(range(p)), (p, r)


@pytest.mark.parametrize("p", RANKS)
def test_halving_doubling(p):
    steps = _testing.hd_steps(p)
    P = _testing.pow2_floor(p)
    assert 1 << steps == P
    olds = participants(p)
    for r in range(p):
        for s in range(steps):
            q = _testing.hd_partner(r, p, s)
            if _testing.folded_away(r, p):
                assert q == -1
                continue
            assert q in olds and q != r and _testing.hd_partner(q, p, s) == r
    # Block ranges: before step s a new rank holds P >> s blocks; it keeps one half and
    # sends the other, which is exactly what its partner keeps.
    for nr in range(P):
        held = (0, P)
        for s in range(steps):
            klo, kn, slo, sn = _testing.hd_blocks(nr, P, s)
            q = nr ^ (P >> (s + 1))
            qklo, qkn, qslo, qsn = _testing.hd_blocks(q, P, s)
            assert kn == sn == P >> (s + 1)
            assert {klo, slo} == {held[0], held[0] + kn} and held[1] == 2 * kn, (p, nr, s)
            assert (qklo, qkn) == (slo, sn) and (qslo, qsn) == (klo, kn)
            held = (klo, kn)
        assert held == (nr, 1), "new rank b owns block b after the reduce-scatter"
    # Simulate reduce-scatter then allgather with contributor sets per block.
    have = {n: [{n} for _ in range(P)] for n in range(P)}  # new rank -> per-block contributors
    for s in range(steps):
        sent = {n: [set(b) for b in have[n]] for n in range(P)}
        for n in range(P):
            klo, kn, _, _ = _testing.hd_blocks(n, P, s)
            q = n ^ (P >> (s + 1))
            for b in range(klo, klo + kn):
                assert not (have[n][b] & sent[q][b])
                have[n][b] = have[n][b] | sent[q][b]
    for n in range(P):
        assert have[n][n] == set(range(P)), (p, n)
    owned = {n: {n: have[n][n]} for n in range(P)}
    for t in range(steps):
        s = steps - 1 - t
        snap = {n: dict(o) for n, o in owned.items()}
        for n in range(P):
            klo, kn, slo, sn = _testing.hd_blocks(n, P, s)
            q = n ^ (P >> (s + 1))
            assert set(snap[n]) == set(range(klo, klo + kn)), "a rank sends what it kept"
            assert set(snap[q]) == set(range(slo, slo + sn)), "and receives what it sent"
            owned[n].update(snap[q])
    for n in range(P):
        assert set(owned[n]) == set(range(P)) and all(v == set(range(P)) for v in owned[n].values())
    # Blocks tile every count; the final owned ranges are disjoint and cover it.
    for count in COUNTS + [p - 1, p + 1, P - 1, P + 1]:
        ranges = [_testing.block_elems(count, P, b, 1) for b in range(P)]
        assert ranges[0][0] == 0 and sum(n for _, n in ranges) == count
        for (b0, n0), (b1, _) in zip(ranges, ranges[1:]):
            assert b0 + n0 == b1
        for nr in range(P):
            for s in range(steps):
                klo, kn, slo, sn = _testing.hd_blocks(nr, P, s)
                kb, kc = _testing.block_elems(count, P, klo, kn)
                assert (kb, kc) == (ranges[klo][0], sum(n for _, n in ranges[klo : klo + kn]))


def tree_of(p, t):
    return {r: _testing.tree_links(p, r, t) for r in range(p)}


@pytest.mark.parametrize("p", RANKS)
def test_double_binary_tree(p):
    interior = {r: 0 for r in range(p)}
    for t in (0, 1):
        links = tree_of(p, t)
        roots = [r for r, (parent, _, _) in links.items() if parent == -1]
        assert roots == [_testing.tree_root(p, t)], (p, t, roots)
        root = roots[0]
        for r, (parent, c0, c1) in links.items():
            children = [c for c in (c0, c1) if c != -1]
            assert len(set(children)) == len(children) and r not in children
            for c in children:
                assert 0 <= c < p and links[c][0] == r, f"child {c} of {r} names another parent (p={p}, tree {t})"
            if parent != -1:
                assert 0 <= parent < p and r in links[parent][1:], "parent and children agree"
            if children:
                interior[r] += 1
        # every rank reaches the root (acyclic, spanning), and the depth is logarithmic
        depth = 0
        for r in range(p):
            seen, x = set(), r
            while x != root:
                assert x not in seen, f"cycle in tree {t} (p={p})"
                seen.add(x)
                x = links[x][0]
            depth = max(depth, len(seen))
        assert (1 << depth) <= 2 * max(p, 1), (p, t, depth)
        if p > 1:
            assert sum(1 for c in links[root][1:] if c != -1) == 1, "the root has one child"
    # complementary: a rank interior in one tree is a leaf in the other, except rank 0 for
    # odd p (the root of tree 0, interior in tree 1)
    both = [r for r in range(p) if interior[r] == 2]
    assert both == ([] if p % 2 == 0 or p < 3 else [0]), (p, both)


def _hosts_layouts():
    yield [0]  # one rank
    for per in (1, 2, 3, 4):  # per ranks on each of h hosts, in blocks
        for h in (1, 2, 3, 5):
            yield [q // per for q in range(per * h)]
    yield [0, 1, 0, 1, 0, 1]  # round-robin placement (mpiexec -ppn 1 style)
    yield [0, 0, 0, 1]  # irregular: 3 + 1
    yield [2, 2, 7, 7, 2, 7]  # host ids need not be 0..h-1


@pytest.mark.parametrize("host_of", list(_hosts_layouts()), ids=str)
def test_hierarchy(host_of):
    """Local groups partition the ranks by host; cross groups take the same local index
    on every host, in host order; every rank agrees on both."""
    p = len(host_of)
    views = [_testing.hierarchy(host_of, r) for r in range(p)]
    order = list(dict.fromkeys(host_of))
    per_host = {h: [q for q in range(p) if host_of[q] == h] for h in order}
    regular = len({len(v) for v in per_host.values()}) == 1
    for r, v in enumerate(views):
        assert v["hosts"] == len(order) and v["regular"] == regular
        assert v["local"] == per_host[host_of[r]] and v["local"][v["local_index"]] == r
        assert v["cross_index"] == order.index(host_of[r])
        if regular:
            assert v["cross"] == [per_host[h][v["local_index"]] for h in order]
            assert v["cross"][v["cross_index"]] == r
            for q in v["cross"]:  # my cross partners see the same group
                assert views[q]["cross"] == v["cross"]
        for q in v["local"]:
            assert views[q]["local"] == v["local"]
