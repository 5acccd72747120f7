/* threads_os.h: the little the worker pool (threads.c) needs from the operating system,
 * one file per OS: threads_linux.c for the emulated server (raw clone() and futexes,
 * no libc: qemu-hexagon runs each clone as a host thread), threads_qurt.c for the
 * FastRPC skel on a device (QuRT's POSIX threads and futexes). */
#ifndef DSPTRAIN_THREADS_OS_H
#define DSPTRAIN_THREADS_OS_H

#include <stdint.h>

/* A running thread, for dspt_os_join. */
struct dspt_os_thread {
    uint32_t word[4];   /* the OS's handle (Linux: the tid the kernel clears at exit) */
};

/* Start entry(arg) on a new thread with a stack of `stack_bytes`; 0 on success. */
int dspt_os_start(struct dspt_os_thread *th, void (*entry)(void *), void *arg, uint32_t stack_bytes);
/* Wait until a thread dspt_os_start started has returned from its entry. */
void dspt_os_join(struct dspt_os_thread *th);
/* Sleep while *word == value (may return early: callers test again). */
void dspt_os_wait(uint32_t *word, uint32_t value);
/* Wake every thread sleeping on word. */
void dspt_os_wake(uint32_t *word);
/* `bytes` of memory aligned to 128 bytes, or NULL; dspt_os_free gives it back. */
void *dspt_os_alloc(uint32_t bytes);
void dspt_os_free(void *p, uint32_t bytes);

#endif
