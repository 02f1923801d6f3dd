"""The simulator's inner loops, compiled with numba: finger columns, PNS choice, hop delays, routing.

Why compiled: a converged ring is sorted ids, and what costs is walking them. A finger column is a
merge of two sorted sequences (the ids, and the ids shifted by 2^j), linear in compiled code where
numpy can only binary-search every needle; a lookup is a short loop of dependent steps that numpy
can only vectorize across lookups at the price of a dozen temporaries per step. Compiled, each
lookup runs as the scalar loop it is, and `prange` spreads lookups over every core.

Everything here works on ring positions (indexes into the sorted ids) and follows the rules spelled
out in sim/lookup.py (routing) and sim/proximity.py (PNS) exactly; those modules are the readable
face, this one the machine room. Arithmetic on ids is uint64 throughout: numba turns a mix of
signed and unsigned integers into floats, so every constant below is typed.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.cpython.unsafe.numbers import leading_zeros

U0 = np.uint64(0)
U1 = np.uint64(1)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
QUANTILE_SHIFT = np.uint64(48)  # 64 - sim/latency.py's QUANTILE_BITS

NO_DELAY, CONSTANT, LOGNORMAL, TABLE = 0, 1, 2, 3


@njit(cache=True, inline="always")
def searchsorted_left(ids, x):
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) >> 1
        if ids[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def floor_log2(x):
    """floor(log2 x) for uint64 x > 0: one count-leading-zeros instruction, no branch to mispredict
    while the load that gave x is still in flight."""
    return 63 - np.int64(leading_zeros(x))


@njit(cache=True, inline="always")
def mix(x):
    """splitmix64's finalizer, as sim/latency.py's _mix."""
    x = (x ^ (x >> np.uint64(30))) * MIX1
    x = (x ^ (x >> np.uint64(27))) * MIX2
    return x ^ (x >> np.uint64(31))


@njit(cache=True)
def hop_delay(a, b, d):
    """Delay in ms from position a to position b under the model packed in `d` (see sim/latency.py).

    d = (mode, constant ms, lognormal quantiles, lognormal seed, host of each real node, host delay
    table, real node of each position, whether positions map to real nodes)."""
    mode, ms, quantiles, seed, attach, table, real, mapped = d
    if mode == NO_DELAY:
        return 0.0
    if mapped:
        a, b = real[a], real[b]
    if a == b:
        return 0.0
    if mode == CONSTANT:
        return ms
    if mode == LOGNORMAL:
        lo, hi = np.uint64(min(a, b)), np.uint64(max(a, b))
        return quantiles[mix((lo * GOLDEN) ^ hi ^ seed) >> QUANTILE_SHIFT]
    return np.float64(table[attach[a], attach[b]])


@njit(cache=True, inline="always")
def successor_at(ids, index, shift, t):
    """The position of the first id >= t (wrapping to 0): the bucket index narrows it to a few ids.

    index[b] is the first position whose id's top bits are >= b, with about one id a bucket, so this
    reads two cache lines where a binary search over the ring would read twenty."""
    n = len(ids)
    pos = index[t >> shift]
    while pos < n and ids[pos] < t:
        pos += 1
    return pos if pos < n else 0


@njit(cache=True)
def pns_pick(c, f0, level, k, ids, mask, bits, d):
    """Finger `level` of position c under PNS: among the first k nodes of the interval
    [id_c + 2^level, id_c + 2^(level+1)) -- f0, the interval's first node, and its successors -- the
    one with the lowest delay from c (the first of equals). An empty interval keeps f0, as plain Chord."""
    n = len(ids)
    me = ids[c]
    top = level + 1 >= bits
    span = U0 if top else U1 << np.uint64(level + 1)
    if f0 == c or (not top and ((ids[f0] - me) & mask) >= span):
        return f0
    best, best_delay, pos = f0, hop_delay(c, f0, d), f0
    for _ in range(1, k):
        pos += 1
        if pos == n:
            pos = 0
        if pos == c or (not top and ((ids[pos] - me) & mask) >= span):
            break
        delay = hop_delay(c, pos, d)
        if delay < best_delay:
            best, best_delay = pos, delay
    return best


@njit(cache=True, parallel=True)
def finger_columns(ids, mask, bits, base, out):
    """out[j - base, i] = successor(id_i + 2^j): a linear merge per level, levels spread over cores."""
    n = len(ids)
    for col in prange(bits - base):
        step = U1 << np.uint64(base + col)
        wrap = searchsorted_left(ids, (mask - step) + U1)  # ids from here on wrap past zero
        if wrap > 0:
            f = searchsorted_left(ids, ids[0] + step)
            for i in range(wrap):
                t = ids[i] + step
                while f < n and ids[f] < t:
                    f += 1
                out[col, i] = f if f < n else 0
        if wrap < n:
            f = searchsorted_left(ids, (ids[wrap] + step) & mask)
            for i in range(wrap, n):
                t = (ids[i] + step) & mask
                while f < n and ids[f] < t:
                    f += 1
                out[col, i] = f if f < n else 0


@njit(cache=True, parallel=True)
def pns_columns(ids, mask, bits, base, k, d, out):
    """Replace each stored finger by its PNS choice among k candidates (out as from finger_columns)."""
    n = len(ids)
    d0, d1, d2, d3, d4, d5, d6, d7 = d  # a parallel loop takes no tuple of arrays
    for i in prange(n):
        dl = (d0, d1, d2, d3, d4, d5, d6, d7)
        for col in range(out.shape[0]):
            out[col, i] = pns_pick(np.int64(i), np.int64(out[col, i]), base + col, k, ids, mask, bits, dl)


# The routing state the loops below share, packed in one tuple `rt`:
# (ids, mask, bits, r, table, base, pns, pd, index, shift) -- the ring's sorted ids and id mask, the
# successor-list length, the stored finger levels base.. and PNS sample count, the delay model PNS
# chose by, and the bucket index with its shift.


@njit(cache=True, inline="always")
def finger_at(c, level, rt):
    """Finger `level` of c: stored, or derived (the bucket index, then the PNS choice)."""
    ids, mask, bits, r, table, base, pns, pd, index, shift = rt
    if level >= base:
        return np.int64(table[level - base, c])
    f = successor_at(ids, index, shift, (ids[c] + (U1 << np.uint64(level))) & mask)
    return pns_pick(c, f, level, pns, ids, mask, bits, pd) if pns > 1 else f


@njit(cache=True, inline="always")
def farthest_candidate(c, q, rt):
    """The farthest finger or successor-list entry of c at or before position q (q != c).

    Finger j lies in [id_c + 2^j, ...), so the farthest at or before q is finger L = floor(log2 d(c, q))
    when it does not overshoot q (plain Chord's never does: it is the first node past id_c + 2^L), and
    otherwise finger L - 1, which ends before id_c + 2^L <= id_q."""
    ids, mask, r = rt[0], rt[1], rt[3]
    n = len(ids)
    steps = q - c if q >= c else q - c + n
    if steps <= r:
        return q
    me = ids[c]
    dq = (ids[q] - me) & mask
    level = floor_log2(dq)
    finger = finger_at(c, level, rt)
    if ((ids[finger] - me) & mask) > dq:
        finger = finger_at(c, level - 1, rt)
    listed = c + r
    if listed >= n:
        listed -= n
    return finger if ((ids[finger] - me) & mask) > ((ids[listed] - me) & mask) else listed


@njit(cache=True, inline="always")
def _known(dead, count, pos):
    for i in range(count):
        if dead[i] == pos:
            return True
    return False


@njit(cache=True, inline="always")
def listed_owner(c, before, n, r):
    """The owner's position (the one after `before`) when c's successor list holds it, else -1: with
    proximity route selection c names it at once instead of forwarding to its predecessor."""
    o = before + 1 if before + 1 < n else 0
    steps = o - c if o >= c else o - c + n
    return o if 1 <= steps <= r else -1


@njit(cache=True)
def route_one(k, origin, before, rt, alive, d, iterative, timeout_ms, max_hops, prs=False):
    """One lookup of key k from `origin` (before = the last position before k), by sim/lookup.py's rule,
    with the nodes `alive` marks dead timing out. `d` is the delay model latency is measured with;
    `prs`: a node whose successor list holds the owner names it (a dead owner: routing as without).
    Returns (owner or -1, hops, timeouts, latency ms, the node that named the owner)."""
    ids, mask, r = rt[0], rt[1], rt[3]
    n = len(ids)
    dead = np.empty(16, dtype=np.int64)
    count = 0
    c, q = origin, before
    hops = timeouts = 0
    latency = 0.0
    while True:
        me = ids[c]
        s = c + 1 if c + 1 < n else 0
        gone = False
        skip = 1
        while _known(dead, count, s):
            skip += 1
            if skip > r:
                gone = True
                break
            s = (c + skip) % n
        dk = (k - me) & mask
        done = dk != U0 and dk <= ((ids[s] - me) & mask) and not gone
        fail = hops > max_hops
        timed = False
        if prs and not done and not gone:
            o = listed_owner(c, before, n, r)
            if o >= 0 and alive[o] and not _known(dead, count, o):
                return o, hops, timeouts, latency + timeouts * timeout_ms, c
        if done and not alive[s]:
            timed, done = True, False
            if count == len(dead):
                dead = np.concatenate((dead, np.empty(len(dead), dtype=np.int64)))
            dead[count] = s
            count += 1
        if done:
            return s, hops, timeouts, latency + timeouts * timeout_ms, c
        if not (fail or timed):
            if q == c:  # no candidate left before k
                fail = True
            else:
                best = farthest_candidate(c, q, rt)
                seen = _known(dead, count, best)
                if seen or not alive[best]:
                    if not seen:
                        if count == len(dead):
                            dead = np.concatenate((dead, np.empty(len(dead), dtype=np.int64)))
                        dead[count] = best
                        count += 1
                        timed = True
                    q = best - 1 if best > 0 else n - 1  # ask the same node for the next best
                else:
                    latency += 2.0 * hop_delay(origin, best, d) if iterative else hop_delay(c, best, d)
                    c, q = best, before
                    hops += 1
        if timed:
            timeouts += 1
        if fail:
            return -1, hops, timeouts, latency + timeouts * timeout_ms, c


@njit(cache=True, parallel=True)
def route_all(keys, origins, before, rt, alive, d, iterative, timeout_ms, max_hops,
              owners, hops, timeouts, latency, last, prs=False):
    """route_one over every lookup, spread over the cores."""
    ids, mask, bits, r, table, base, pns, pd, index, shift = rt  # a parallel loop takes no tuple of arrays
    d0, d1, d2, d3, d4, d5, d6, d7 = d
    p0, p1, p2, p3, p4, p5, p6, p7 = pd
    for i in prange(len(keys)):
        local = (ids, mask, bits, r, table, base, pns, (p0, p1, p2, p3, p4, p5, p6, p7), index, shift)
        o, h, t, ms, at = route_one(keys[i], origins[i], before[i], local, alive, (d0, d1, d2, d3, d4, d5, d6, d7),
                                    iterative, timeout_ms, max_hops, prs)
        owners[i], hops[i], timeouts[i], latency[i], last[i] = o, h, t, ms, at


LANES = 256  # lookups one core advances in step: their memory loads overlap instead of queueing
STRIPE = 16384  # lookups a core takes at a time; a lane that finishes takes the stripe's next one


@njit(cache=True, parallel=True)
def route_live(keys, origins, before, rt, d, iterative, max_hops, owners, hops, latency, last, prs=False):
    """route_all for a ring with no dead node, LANES lookups at a time per core.

    One lookup is a chain of dependent memory loads (a finger's position, then its id), each a cache
    miss on a big ring. Advancing LANES lookups together, first touching what every lane's next step
    will read and then taking the steps, lets those misses overlap; a lane whose lookup ends takes
    the next one at once, so the overlap does not thin out. The steps themselves are route_one's
    without the dead-node bookkeeping (`prs` as there)."""
    ids, mask, bits, r, table, base, pns, pd, index, shift = rt  # a parallel loop takes no tuple of arrays
    d0, d1, d2, d3, d4, d5, d6, d7 = d
    p0, p1, p2, p3, p4, p5, p6, p7 = pd
    m, n = len(keys), len(ids)
    stripes = (m + STRIPE - 1) // STRIPE
    for b in prange(stripes):
        local = (ids, mask, bits, r, table, base, pns, (p0, p1, p2, p3, p4, p5, p6, p7), index, shift)
        dl = (d0, d1, d2, d3, d4, d5, d6, d7)
        lo = b * STRIPE
        hi = min(lo + STRIPE, m)
        width = min(LANES, hi - lo)
        lane = np.arange(lo, lo + width)
        cur = origins[lo:lo + width].copy()
        idq = ids[before[lo:lo + width]]  # the id each lane's lookup must not pass
        steps = np.zeros(width, dtype=np.int64)
        spent = np.zeros(width, dtype=np.float64)
        where = np.zeros(width, dtype=np.int64)
        active = np.ones(width, dtype=np.bool_)
        following = lo + width
        left = width
        while left:
            touch = U0
            for g in range(width):  # touch what each lane's step reads: its successors, its finger's row
                if active[g]:
                    c = cur[g]
                    me = ids[c]
                    touch += ids[c + 1 if c + 1 < n else 0] + ids[c + r if c + r < n else c + r - n]
                    level = floor_log2(((idq[g] - me) & mask) | U1)
                    if level >= base:
                        where[g] = table[level - base, c]
                    else:
                        where[g] = index[((me + (U1 << np.uint64(level))) & mask) >> shift]
            for g in range(width):  # ... and the ids found there
                if active[g] and where[g] < n:
                    touch += ids[where[g]]
            for g in range(width):
                if not active[g]:
                    continue
                i = lane[g]
                c, k, q = cur[g], keys[i], before[i]
                me = ids[c]
                s = c + 1 if c + 1 < n else 0
                dk = (k - me) & mask
                ended = False
                listed = listed_owner(c, q, n, r) if prs else -1
                if listed >= 0:
                    owners[i], last[i] = listed, c
                    ended = True
                elif dk != U0 and dk <= ((ids[s] - me) & mask):
                    owners[i], last[i] = s, c
                    ended = True
                elif steps[g] > max_hops or q == c:
                    owners[i], last[i] = -1, c
                    ended = True
                else:
                    best = farthest_candidate(c, q, local)
                    spent[g] += 2.0 * hop_delay(origins[i], best, dl) if iterative else hop_delay(c, best, dl)
                    cur[g] = best
                    steps[g] += 1
                if ended:
                    hops[i], latency[i] = steps[g], spent[g]
                    if following < hi:
                        lane[g], cur[g], idq[g] = following, origins[following], ids[before[following]]
                        steps[g], spent[g] = 0, 0.0
                        following += 1
                    else:
                        active[g] = False
                        left -= 1
            if touch == U1:  # keeps the touching loads from being optimized away; never true in practice
                owners[lo] = owners[lo]


@njit(cache=True, parallel=True)
def positions_before(keys, ids, index, shift, out):
    """out[i] = the last position before keys[i]: the owner's predecessor (wrapping)."""
    n = len(ids)
    for i in prange(len(keys)):
        pos = successor_at(ids, index, shift, keys[i])
        out[i] = pos - 1 if pos > 0 else n - 1
