/* threads_linux.c: threads_os.h for the emulated DSP server, straight on Linux system
 * calls (no libc: clang-16's Hexagon target ships none). A thread is a clone() sharing
 * the address space; qemu-hexagon runs each guest thread on a host thread with its own
 * CPU state, so each reads its own packet counters (QEMU's c20..c22). Joins and sleeps
 * are futexes. */
#include "dsp_sys.h"
#include "threads_os.h"

enum { SYS_exit = 93, SYS_futex = 98, SYS_clone = 220 };
#define FUTEX_WAIT 0
#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129
/* a thread of this process (what pthread_create asks for), its tid written to the
 * parent's word before clone returns and cleared, with a futex wake, when it exits */
#define CLONE_THREAD_FLAGS 0x50f00L
#define CLONE_PARENT_SETTID 0x00100000L
#define CLONE_CHILD_CLEARTID 0x00200000L
#define PROT_RW 3
#define MAP_PRIVATE_ANON 0x22

/* long dspt_clone(flags, stack_top, entry, arg, tid): the child starts on its own stack
 * (the kernel sets r29), so it must not return into C: it calls entry(arg) and exits
 * the thread. r9/r10 survive the system call in both threads. */
long dspt_clone(long flags, void *stack_top, void (*entry)(void *), void *arg, uint32_t *tid);
__asm__(".text\n.globl dspt_clone\n.type dspt_clone,@function\n.p2align 4\n"
        "dspt_clone:\n"
        "  r9 = r2\n"
        "  r10 = r3\n"
        "  r2 = r4\n"            /* parent_tid */
        "  r3 = r4\n"            /* child_tid (cleared at exit) */
        "  r4 = #0\n"            /* tls */
        "  r6 = #220\n"
        "  trap0(#1)\n"
        "  p0 = cmp.eq(r0, #0)\n"
        "  if (!p0) jumpr r31\n" /* the parent: the child's tid or -errno */
        "  r0 = r10\n"
        "  callr r9\n"
        "  r0 = #0\n"
        "  r6 = #93\n"           /* exit: this thread only */
        "  trap0(#1)\n"
        ".size dspt_clone, .-dspt_clone\n");

void *dspt_os_alloc(uint32_t bytes)
{
    long p = dsp_syscall6(SYS_mmap, 0, (long)bytes, PROT_RW, MAP_PRIVATE_ANON, -1, 0);
    return (p < 0 && p > -4096) ? 0 : (void *)p;   /* pages: aligned and zeroed */
}

void dspt_os_free(void *p, uint32_t bytes)
{
    if (p) dsp_syscall3(SYS_munmap, p, bytes, 0);
}

int dspt_os_start(struct dspt_os_thread *th, void (*entry)(void *), void *arg, uint32_t stack_bytes)
{
    uint8_t *stack = dspt_os_alloc(stack_bytes);
    if (!stack) return -1;
    th->word[1] = (uint32_t)(uintptr_t)stack;
    th->word[2] = stack_bytes;
    long tid = dspt_clone(CLONE_THREAD_FLAGS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID,
                          stack + (stack_bytes & ~127u), entry, arg, &th->word[0]);
    if (tid < 0) { dspt_os_free(stack, stack_bytes); return -1; }
    return 0;
}

void dspt_os_join(struct dspt_os_thread *th)
{
    uint32_t tid;
    /* the exiting thread's wake on its tid word is a shared futex wake (as the kernel's),
     * which a private wait never sees: this wait is shared */
    while ((tid = __atomic_load_n(&th->word[0], __ATOMIC_ACQUIRE)) != 0)
        dsp_syscall6(SYS_futex, (long)&th->word[0], FUTEX_WAIT, (long)tid, 0, 0, 0);
    dspt_os_free((void *)(uintptr_t)th->word[1], th->word[2]);
}

void dspt_os_wait(uint32_t *word, uint32_t value)
{
    dsp_syscall6(SYS_futex, (long)word, FUTEX_WAIT_PRIVATE, (long)value, 0, 0, 0);
}

void dspt_os_wake(uint32_t *word)
{
    dsp_syscall6(SYS_futex, (long)word, FUTEX_WAKE_PRIVATE, 0x7fffffff, 0, 0, 0);
}
