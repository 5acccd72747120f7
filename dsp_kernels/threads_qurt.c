/* threads_qurt.c: threads_os.h for the FastRPC skel on a device. The cDSP's RTOS, QuRT,
 * offers POSIX threads (pthread_create / pthread_join) and futexes (qurt_futex_wait /
 * qurt_futex_wake, qurt_futex.h); the worker pool's threads run one share each on one
 * of the HVX contexts. Without the SDK (`make skel`) these are the QuRT functions the
 * DSP's loader resolves, declared below; attribute and handle objects are handled only
 * through those functions, in buffers larger than QuRT's (so no layout is restated).
 * Not run on a device here: whether a worker must first reserve its HVX context
 * (qurt_hvx_lock on older firmware; skel.c's own thread takes none either) is unverified. */
#ifdef DSPT_HEXAGON_SDK
#include <pthread.h>
#include <stdlib.h>

#include "qurt_futex.h"
typedef pthread_t dspt_pthread;
typedef pthread_attr_t dspt_pthread_attr;
#else
#include "fastrpc_abi.h"
typedef struct { uint32_t word[4]; } dspt_pthread;
typedef union { uint8_t bytes[256]; uint64_t align; } dspt_pthread_attr;
int pthread_attr_init(dspt_pthread_attr *attr);
int pthread_attr_setstacksize(dspt_pthread_attr *attr, size_t bytes);
int pthread_attr_destroy(dspt_pthread_attr *attr);
int pthread_create(dspt_pthread *th, const dspt_pthread_attr *attr, void *(*entry)(void *), void *arg);
int pthread_join(dspt_pthread th, void **ret);
int qurt_futex_wait(void *lock, int val);
int qurt_futex_wake(void *lock, int n_to_wake);
#endif
#include "threads_os.h"

_Static_assert(sizeof(dspt_pthread) <= sizeof(struct dspt_os_thread), "pthread_t fits the handle");

struct start {   /* pthread's entry returns a pointer; the pool's returns nothing */
    void (*entry)(void *);
    void *arg;
};

static void *trampoline(void *p)
{
    struct start s = *(struct start *)p;
    free(p);
    s.entry(s.arg);
    return 0;
}

int dspt_os_start(struct dspt_os_thread *th, void (*entry)(void *), void *arg, uint32_t stack_bytes)
{
    struct start *s = calloc(1, sizeof *s);
    dspt_pthread_attr attr;
    if (!s) return -1;
    s->entry = entry;
    s->arg = arg;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, stack_bytes);
    int rc = pthread_create((dspt_pthread *)th->word, &attr, trampoline, s);
    pthread_attr_destroy(&attr);
    if (rc) free(s);
    return rc ? -1 : 0;
}

void dspt_os_join(struct dspt_os_thread *th)
{
    pthread_join(*(dspt_pthread *)th->word, 0);
}

void dspt_os_wait(uint32_t *word, uint32_t value)
{
    qurt_futex_wait(word, (int)value);
}

void dspt_os_wake(uint32_t *word)
{
    qurt_futex_wake(word, 0x7fffffff);
}

void *dspt_os_alloc(uint32_t bytes)
{
    return memalign(128, bytes);
}

void dspt_os_free(void *p, uint32_t bytes)
{
    (void)bytes;
    free(p);
}
