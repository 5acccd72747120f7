"""Packets of dsp_kernels/dwconv_wgrad_rows.c: the depthwise weight gradient's 3 x 3 row loops.

The loops are software-pipelined by hand (modulo scheduling, B. R. Rau, "Iterative modulo
scheduling", MICRO-27, 1994): one output's products, the vadds of products before and the
next output's loads share packets. This script makes them: a greedy list schedule of one
output (stride 2) or two (stride 1) under HVX's packet limits (4 slots, 2 vrmpy, 1 vector
load; vmemu takes 2 slots), repeated with the register roles swapped until the products
carried into the next packets are the same each time; then a symbolic run of the whole loop
(prime, rows of halves, row changes, drain) over several shapes checks that each tap's sum
holds every product x[oh*s + i, ow*s + j] * err[oh, ow] exactly once.

    python scripts/dw_wgrad_rows.py            # print the 4 loops' packets (C string lines)
    python scripts/dw_wgrad_rows.py --check    # and check they are the ones in the C file
"""

import re
import sys
from collections import Counter
from pathlib import Path

C_FILE = Path(__file__).resolve().parents[1] / "dsp_kernels" / "dwconv_wgrad_rows.c"
TEMPS = 9


def vregs(first, n):
    return [f"v{first + k}" for k in range(n)]


ACC = [f"%[a{t}]" for t in range(9)]
XP = ["%[x0]", "%[x1]", "%[x2]"]
EP = "%[e]"


def half(prods, loads, pending, length, aligned):
    """Packets of one half. prods: (source register, err register, tap); loads: (dest, pointer,
    index of the last product reading dest, -1 if none). pending: (temp, tap) carried in."""
    ld, ld_slots = ("vmem", 1) if aligned else ("vmemu", 2)
    temps = vregs(14 if len(prods) == 18 else 10, TEMPS)
    fifo = [(t, a, -1) for t, a in pending]
    packets, placed, n_p, n_l, k = [], {}, 0, 0, 0
    while n_p < len(prods) or n_l < len(loads) or k < length:
        if k > 40:
            return None, None
        for n_new in (2, 1, 0):
            if n_p + n_new > len(prods):
                continue
            new = [(n_p + q, temps[(n_p + q) % TEMPS]) for q in range(n_new)]
            slots, load, f, adds, taps = n_new, None, list(fifo), [], set()
            if n_l < len(loads):
                last = loads[n_l][2]
                at = -1 if last < 0 else placed.get(last, 99) if last < n_p else (k if last < n_p + n_new else 99)
                if at <= k and slots + ld_slots <= 4:
                    load, slots = loads[n_l], slots + ld_slots
            while slots < 4 and f and f[0][2] < k and f[0][1] not in taps:
                t, a, _ = f.pop(0)
                adds.append((t, a))
                taps.add(a)
                slots += 1
            if not any(t in {b for b, _, _ in f} for _, t in new):  # a temp's old product added by now
                break
        ins = []
        for p, t in new:
            src, err, tap = prods[p]
            ins.append(f"{t}.w = vrmpy({src}.b,{err}.b)")
            placed[p] = k
        fifo = f + [(t, prods[p][2], k) for p, t in new]
        n_p += n_new
        if load:
            ins.append(f"{load[0]} = {ld}({load[1]}++m0)")
            n_l += 1
        ins += [f"{ACC[a]}.w = vadd({ACC[a]}.w,{t}.w)" for t, a in adds]
        packets.append(ins)
        k += 1
    return packets, [(t, a) for t, a, _ in fifo]


def steady(make_half, aligned):
    """The shortest half length whose two-half period repeats: (body packets, pending)."""
    for length in range(5, 20):
        pend = []
        for it in range(8):
            a, pend_a = half(*make_half(0), pend, length, aligned)
            if a is None:
                break
            b, pend_b = half(*make_half(1), pend_a, length, aligned)
            if b is None:
                break
            if it > 2 and pend_b == pend and len(a) == len(b) == length:
                return a + b, pend
            pend = pend_b
    raise SystemExit("no schedule")


def s1_half(parity):
    """Stride 1: outputs o, o + 1 read columns 0-3 (X: 0, 1; Y: 2, 3) and reload X with 4, 5."""
    sets = [[vregs(2 * i, 2) for i in range(3)], [vregs(6 + 2 * i, 2) for i in range(3)]]
    x, y, e = sets[parity], sets[1 - parity], ["v12", "v13"]
    order = [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 1, 2), (1, 0, 0), (1, 0, 1), (1, 0, 2)]
    order += [(0, 2, 0), (0, 2, 1), (0, 2, 2), (1, 1, 0), (1, 1, 1), (1, 1, 2), (1, 2, 0), (1, 2, 1), (1, 2, 2)]
    prods = [((x[i][o + j] if o + j < 2 else y[i][o + j - 2]), e[o], 3 * i + j) for o, j, i in order]

    def last(pred):
        return max(p for p, (o, j, i) in enumerate(order) if pred(o, j, i))

    loads = [(x[i][0], XP[i], last(lambda o, j, r, i=i: o + j == 0 and r == i)) for i in range(3)]
    loads += [(x[i][1], XP[i], last(lambda o, j, r, i=i: o + j == 1 and r == i)) for i in range(3)]
    loads += [(e[0], EP, last(lambda o, j, r: o == 0)), (e[1], EP, last(lambda o, j, r: o == 1))]
    return prods, loads


def s2_half(parity):
    """Stride 2: output o reads columns 2o (K), 2o + 1 (N), 2o + 2 (M); N, M of the next
    output go to N and K's registers, so K and M trade sets; err alternates two registers."""
    sets, n = [vregs(0, 3), vregs(3, 3)], vregs(6, 3)
    k_, m = sets[parity], sets[1 - parity]
    e, e_next = ("v9", "v19") if parity == 0 else ("v19", "v9")
    prods = [((k_, n, m)[j][i], e, 3 * i + j) for j in range(3) for i in range(3)]
    loads = [(e_next, EP, -1)]
    loads += [(n[i], XP[i], 3 + i) for i in range(3)]
    loads += [(k_[i], XP[i], i) for i in range(3)]
    return prods, loads


def program(stride, aligned):
    """(prime, row start, body, row end, drain) packet lists; labels 2 (rows), 3 or 2 (body)."""
    ld = "vmem" if aligned else "vmemu"
    if stride == 1:
        body, pend = steady(s1_half, aligned)
        p, q = [vregs(2 * i, 2) for i in range(3)], [vregs(6 + 2 * i, 2) for i in range(3)]
        prime = [["m0 = %[pitch]"] + [f"{t} = vxor({t},{t})" for t, _ in pend]]
        for i in range(3):
            prime += [[f"{r} = {ld}({XP[i]}++m0)"] for r in p[i] + q[i]]
        prime += [[f"v12 = {ld}({EP}++m0)", "loop1(2f, %[rows])"], [f"v13 = {ld}({EP}++m0)", "loop0(2f, %[nb])"]]
        end = [[f"{p[i][c]} = {q[i][c]}", f"{q[i][c]} = {ld}({XP[i]}++m0)"] for i in range(3) for c in range(2)]
        end[0].append("loop0(2b, %[nb])")
        return prime, [], body, end, pend
    body, pend = steady(s2_half, aligned)
    prime = [
        ["m0 = %[pitch]"] + [f"{t} = vxor({t},{t})" for t, _ in pend],
        [f"v9 = {ld}({EP}++m0)", "loop1(2f, %[rows])"],
    ]
    start = [[f"{r} = {ld}({XP[i]}++m0)"] for i in range(3) for r in (f"v{i}", f"v{6 + i}", f"v{3 + i}")]
    start[-1].append("loop0(3f, %[nb])")
    return prime, start, body, [[f"{x} = add({x},%[skip])" for x in XP]], pend


def lines(stride, aligned):
    prime, start, body, end, pend = program(stride, aligned)
    out = ["{ " + "; ".join(p) + " }" for p in prime]
    out.append("2:")
    out += ["{ " + "; ".join(p) + " }" for p in start]
    if start:
        out.append("3:")
    out += ["{ " + "; ".join(p) + " }" + (":endloop0" if n == len(body) - 1 else "") for n, p in enumerate(body)]
    out += ["{ " + "; ".join(p) + " }" + (":endloop1" if n == len(end) - 1 else "") for n, p in enumerate(end)]
    if pend:
        out.append("{ " + "; ".join(f"{ACC[a]}.w = vadd({ACC[a]}.w,{t}.w)" for t, a in pend) + " }")
    return out


def run(stride, aligned, rows, nb):
    """Symbolic run over rows x outputs; True when every tap's sum has each product once."""
    prime, start, body, end, pend = program(stride, aligned)
    ow_n = 4 * nb if stride == 1 else 2 * nb
    cols = ow_n + 2 if stride == 1 else 2 * ow_n + 2
    reg, acc = {}, {t: [] for t in range(9)}
    ptr = {XP[i]: i * cols for i in range(3)} | {EP: 0}

    def packet(ins_list):
        writes, moves = {}, []
        for ins in ins_list:
            if m := re.fullmatch(r"(v\d+)\.w = vrmpy\((v\d+)\.b,(v\d+)\.b\)", ins):
                writes[m[1]] = ("prod", reg.get(m[2]), reg.get(m[3]))
            elif m := re.fullmatch(r"%\[a(\d)\]\.w = vadd\(%\[a\d\]\.w,(v\d+)\.w\)", ins):
                assert "a" + m[1] not in writes, ins
                writes["a" + m[1]] = reg.get(m[2])
            elif m := re.fullmatch(r"(v\d+) = vmemu?\((\S+)\+\+m0\)", ins):
                writes[m[1]] = ("e" if m[2] == EP else "x", ptr[m[2]])
                moves.append((m[2], 1))
            elif m := re.fullmatch(r"(v\d+) = vxor\(.*", ins):
                writes[m[1]] = "zero"
            elif m := re.fullmatch(r"(v\d+) = (v\d+)", ins):
                writes[m[1]] = reg.get(m[2])
            elif m := re.fullmatch(r"(%\[x\d\]) = add\(.*", ins):
                moves.append((m[1], 2 * cols - 2 * ow_n - 3))
            elif not ins.startswith(("loop", "m0")):
                raise ValueError(ins)
        for r, v in writes.items():
            if r.startswith("a"):
                if v != "zero":
                    assert v and v[0] == "prod", (r, v)
                    acc[int(r[1:])].append(v)
            else:
                reg[r] = v
        for p, d in moves:
            ptr[p] += d

    for p in prime:
        packet(p)
    for _ in range(rows):
        for p in start:
            packet(p)
        for _ in range(nb):
            for p in body:
                packet(p)
        for p in end:
            packet(p)
    packet([f"{ACC[a]}.w = vadd({ACC[a]}.w,{t}.w)" for t, a in pend])
    for i in range(3):
        for j in range(3):
            want = Counter(
                ("prod", ("x", (stride * oh + i) * cols + stride * ow + j), ("e", oh * ow_n + ow))
                for oh in range(rows)
                for ow in range(ow_n)
            )
            if Counter(acc[3 * i + j]) != want:
                return False
    return True


def main():
    loops = [(1, True), (1, False), (2, True), (2, False)]
    for stride, aligned in loops:
        for rows, nb in ((1, 1), (2, 3), (4, 1), (8, 2)):
            if not run(stride, aligned, rows, nb):
                raise SystemExit(f"stride {stride} aligned {aligned}: a sum is wrong ({rows} rows, {nb} blocks)")
    text = C_FILE.read_text()
    for stride, aligned in loops:
        block = "\n".join(f'                "{line}\\n"' for line in lines(stride, aligned))
        print(f"/* stride {stride}, {'vmem' if aligned else 'vmemu'} */\n{block}")
        if "--check" in sys.argv and block not in text:
            raise SystemExit(f"{C_FILE.name}: the stride-{stride} {'aligned' if aligned else 'unaligned'} loop differs")
    if "--check" in sys.argv:
        print("checked: every sum exact, the C file's packets as scheduled", file=sys.stderr)


if __name__ == "__main__":
    main()
