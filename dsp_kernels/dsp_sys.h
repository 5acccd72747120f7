/* dsp_sys.h: the little the emulated DSP server needs from Linux, without a libc.
 * Hexagon Linux ABI: syscall number in r6, arguments r0-r5, `trap0(#1)`, result r0;
 * asm-generic syscall numbers. */
#ifndef DSPTRAIN_DSP_SYS_H
#define DSPTRAIN_DSP_SYS_H

#include <stdint.h>

enum {
    SYS_openat = 56, SYS_close = 57, SYS_read = 63, SYS_write = 64,
    SYS_exit_group = 94, SYS_nanosleep = 101, SYS_munmap = 215, SYS_mmap = 222
};

static inline long dsp_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    register long r0 __asm__("r0") = a;
    register long r1 __asm__("r1") = b;
    register long r2 __asm__("r2") = c;
    register long r3 __asm__("r3") = d;
    register long r4 __asm__("r4") = e;
    register long r5 __asm__("r5") = f;
    register long r6 __asm__("r6") = n;
    __asm__ volatile("trap0(#1)"
                     : "+r"(r0)
                     : "r"(r1), "r"(r2), "r"(r3), "r"(r4), "r"(r5), "r"(r6)
                     : "memory");
    return r0;
}

#define dsp_syscall3(n, a, b, c) dsp_syscall6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)

/* QEMU's Hexagon target counts packets, instructions and HVX instructions in the
 * (otherwise reserved) control registers c20, c21, c22. `Rd = Cs` is encoded
 * 0110 1010 000s ssss PP-- ---- ---d dddd; llvm-mc has no names for these
 * registers, so the words are spelled out (d = r0, PP = 11: end of packet). */
struct dsp_counters { uint32_t packets, insns, hvx; };

static inline void dsp_read_counters(struct dsp_counters *c)
{
#ifdef DSPT_EMULATED
    uint32_t p, i, h;
    __asm__ volatile(".word 0x6a14c000\n\t%0 = r0\n\t"
                     ".word 0x6a15c000\n\t%1 = r0\n\t"
                     ".word 0x6a16c000\n\t%2 = r0"
                     : "=r"(p), "=r"(i), "=r"(h) : : "r0");
    c->packets = p; c->insns = i; c->hvx = h;
#else
    uint32_t lo;
    __asm__ volatile("%0 = upcyclelo" : "=r"(lo));  /* device: processor cycles */
    c->packets = lo; c->insns = 0; c->hvx = 0;
#endif
}

#endif
