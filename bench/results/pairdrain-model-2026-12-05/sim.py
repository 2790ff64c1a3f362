#!/usr/bin/env python3
"""Discrete-event model of dashd's persistent v3 backward at head dim 64: the one-tile kernel
(bwd_tc_persistent + bwd_wg_hand/bwd_wg_writer, BWD_WG_DQBUFS=1) and the pair kernel
(bwd_wg_pair_persistent + bwd_wg_pair_hand/bwd_wg_pair_writer), driven by the real schedule
library (dump.c prints sched_job_taken's jobs, units, visits and ranks)."""
import heapq, subprocess, sys, itertools, argparse, os

def load(kind, mask, L, heads, w):
    out = subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), 'dump'), kind, mask, str(L), str(heads), str(w)],
                         capture_output=True, text=True, check=True).stdout.split('\n')
    jobs, M, bh = map(int, out[0].split())
    J = []
    i = 1
    while i < len(out) and out[i]:
        f = out[i].split(); i += 1
        b, st, wend = int(f[1]), int(f[2]), int(f[3])
        units = []
        for _ in range(st):
            g = list(map(int, out[i].split()[1:])); i += 1
            n, steps = g[0], g[1]
            visits = [(g[2 + 2 * k], g[3 + 2 * k]) for k in range(steps)]
            units.append((n, visits))
        J.append((b, wend, units))
    return J, M

class Sim:
    def __init__(self, P, jobs, M, mode, prm):
        self.P, self.jobs, self.M, self.mode, self.p = P, jobs, M, mode, prm
        self.now = 0.0
        self.heap = []
        self.seq = itertools.count()
        self.ctr = {}
        self.ctr_wait = {}     # tile -> list of (rank, gen)
        self.tickets = [[] for _ in range(P)]
        self.ticket_wait = [None] * P
        self.nread = [0] * P
        self.read_wait = [[] for _ in range(P)]   # (k, gen): resume when nread > k
        self.next_job = 0
        self.busy = [0.0] * P  # compute time spent
        self.blocked = [0.0] * P
        self.hoard = 0.0       # time jobs sat in a CTA blocked on an older unit's ticket
        self.end = 0.0
        self.trace = False
        self.log = []
    def sched(self, t, g):
        heapq.heappush(self.heap, (t, next(self.seq), g))
    def step(self, g):
        try:
            w = next(g) if not isinstance(g, tuple) else None
        except StopIteration:
            return
        self.handle(g, w)
    def handle(self, g, w):
        kind = w[0]
        if kind == 'delay':
            self.sched(self.now + w[1], g)
        elif kind == 'ctr':
            tile, rank = w[1], w[2]
            if rank < 0 or self.ctr.get(tile, 0) == rank:
                self.sched(self.now, g)
            else:
                self.ctr_wait.setdefault(tile, []).append((rank, g))
        elif kind == 'read':
            c, k = w[1], w[2]
            if self.nread[c] > k:
                self.sched(self.now, g)
            else:
                self.read_wait[c].append((k, g))
        elif kind == 'ticket':
            c, k = w[1], w[2]
            if len(self.tickets[c]) > k:
                self.sched(self.now, g)
            else:
                self.ticket_wait[c] = (k, g)
    def inc(self, tile):
        v = self.ctr.get(tile, 0) + 1
        self.ctr[tile] = v
        lst = self.ctr_wait.get(tile)
        if lst:
            keep = []
            for (r, g) in lst:
                if r == v:
                    self.sched(self.now + self.p['poll'], g)
                else:
                    keep.append((r, g))
            self.ctr_wait[tile] = keep
    def mark_read(self, c):
        self.nread[c] += 1
        keep = []
        for (k, g) in self.read_wait[c]:
            if self.nread[c] > k:
                self.sched(self.now, g)
            else:
                keep.append((k, g))
        self.read_wait[c] = keep
    def add_ticket(self, c, t):
        self.tickets[c].append(t)
        if self.ticket_wait[c] and self.ticket_wait[c][0] < len(self.tickets[c]):
            g = self.ticket_wait[c][1]
            self.ticket_wait[c] = None
            self.sched(self.now, g)

    def writer(self, c):
        k = 0
        p = self.p
        while True:
            yield ('ticket', c, k)
            t = self.tickets[c][k]
            if t is None:
                return
            tile, rank = t
            if tile is None:       # an odd end: no tile b
                self.mark_read(c); k += 1
                continue
            yield ('ctr', tile, rank)
            yield ('delay', p['rread'])
            self.mark_read(c)
            yield ('delay', p['rdone'])
            self.inc(tile)
            self.end = max(self.end, self.now)
            k += 1

    def compute(self, c):
        p = self.p
        handed = 0
        wait_end = 0
        last_steps = 0
        pair = self.mode == 'pair'
        while True:
            if wait_end > self.next_job:   # the drain rule (shift)
                if handed:
                    yield ('read', c, handed - 1)
            if self.p.get('fix1') and handed and last_steps == 1:  # one-tile: a one-step unit drains
                yield ('read', c, handed - 1)
            if self.p.get('fix') and handed:  # proposed: the one-tile kernel's rule
                yield ('read', c, handed - 1 - self.p['fix_keep'])
            yield ('delay', p['tjob'])
            j = self.next_job; self.next_job += 1
            if j >= len(self.jobs):
                if handed:
                    yield ('read', c, handed - 1)
                self.add_ticket(c, None)
                return
            b, wend, units = self.jobs[j]
            wait_end = wend
            for (n, visits) in units:
                last_steps = len(visits)
                yield ('delay', p['tunit'])
                if not pair:
                    for (m, rank) in visits:
                        t0 = self.now
                        yield ('delay', p['c1'])
                        self.busy[c] += p['c1']
                        t1 = self.now
                        if handed:
                            yield ('read', c, handed - 1)   # DQBUFS=1: the last ticket read
                        self.blocked[c] += self.now - t1
                        if m == visits[0][0] and (n, visits) == units[0]:
                            self.hoard += self.now - t1
                            if self.trace: self.log.append((c, j, t1, self.now))
                        yield ('delay', p['tstage'])
                        self.add_ticket(c, ((b, m), rank)); handed += 1
                else:
                    for q in range(0, len(visits), 2):
                        two = q + 1 < len(visits)
                        yield ('delay', p['c2'] if two else p['c2odd'])
                        self.busy[c] += p['c2']
                        t1 = self.now
                        if handed:   # both buffers' last tickets read (b implies a)
                            yield ('read', c, handed - 1)
                        self.blocked[c] += self.now - t1
                        if q == 0 and (n, visits) == units[0]:
                            self.hoard += self.now - t1
                            if self.trace: self.log.append((c, j, t1, self.now))
                        yield ('delay', p['tstage'])
                        m, rank = visits[q]
                        self.add_ticket(c, ((b, m), rank)); handed += 1
                        if two:
                            m, rank = visits[q + 1]
                            self.add_ticket(c, ((b, m), rank))
                        else:
                            self.add_ticket(c, (None, -1))
                        handed += 1
                yield ('delay', p['tstore'])

    def run(self):
        for c in range(self.P):
            self.sched(0.0, self.compute(c))
            self.sched(0.0, self.writer(c))
        while self.heap:
            t, _, g = heapq.heappop(self.heap)
            self.now = t
            try:
                w = next(g)
            except StopIteration:
                continue
            self.handle(g, w)
        return self.end

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--kind', default='ascending')
    ap.add_argument('--mask', default='causal')
    ap.add_argument('--L', type=int, default=2048)
    ap.add_argument('--heads', type=int, default=0)
    ap.add_argument('--sms', type=int, default=132)
    ap.add_argument('--w', type=int, default=64)
    ap.add_argument('--c2', type=float, default=1.65)
    ap.add_argument('--rdone', type=float, default=0.3)
    ap.add_argument('--fix', type=int, default=0)
    ap.add_argument('--keep', type=int, default=1)
    ap.add_argument('--fix1', type=int, default=0)
    ap.add_argument('--modes', default='one,pair')
    a = ap.parse_args()
    heads = a.heads or 16384 // a.L * 32
    jobs, M = load(a.kind, a.mask, a.L, heads, a.w)
    work = sum(len(v) for (_, _, us) in jobs for (_, v) in us)
    res = {}
    for mode in ('one', 'pair'):
        prm = dict(c1=1.0, c2=a.c2, c2odd=a.c2, rread=0.1, rdone=a.rdone, poll=0.05, tjob=0.05,
                   tunit=0.3, tstore=0.2, tstage=0.05, fix=a.fix if mode == 'pair' else 0, fix_keep=a.keep, fix1=a.fix1 if mode == 'one' else 0)
        s = Sim(a.sms, jobs, M, mode, prm)
        T = s.run()
        res[mode] = T
        tb = sum(s.blocked)
        print(f"  {mode:4s}: makespan {T:8.1f}  compute {sum(s.busy)/a.sms:8.1f}/CTA  blocked in hands {tb/a.sms:8.1f}/CTA, of which at a job's first hand {s.hoard/a.sms:8.1f}/CTA")
    ideal1 = work / a.sms
    print(f"{a.kind:10s} {a.mask:6s} L={a.L:5d} heads={heads:3d} tiles={work:6d} "
          f"one={res['one']:8.1f} ({ideal1/res['one']:.2f} of tiles/P) pair={res['pair']:8.1f} ({ideal1/a.c2*2/res['pair']:.2f}) "
          f"pair/one speed={res['one']/res['pair']:.2f}")

main()
