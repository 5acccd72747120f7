/* fastrpc_abi.h: the FastRPC skel ABI the dsptrain skel is built against, declared here
 * so the device build compiles (and is compiled in CI, tests/backend/test_dsp_device.py)
 * without the Hexagon SDK. With the SDK (`make device`), its own remote.h, HAP_mem.h and
 * the qaic-generated iface.h / iface_skel.c are used instead; the facts below are the
 * SDK's (remote.h: argument unions and REMOTE_SCALARS_*; AEEStdErr.h: error codes;
 * HAP_mem.h: HAP_mmap_get/put), restated, and must keep matching it. */
#ifndef DSPTRAIN_FASTRPC_ABI_H
#define DSPTRAIN_FASTRPC_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t remote_handle64;
typedef uint32_t remote_handle;
typedef uint64_t uint64;

typedef struct {
    void *pv;
    size_t nLen;
} remote_buf;

typedef struct {
    int32_t fd;
    uint32_t offset;
} remote_dma_handle;

typedef union {
    remote_buf buf;
    remote_handle h;
    remote_handle64 h64;
    remote_dma_handle dma;
} remote_arg;

/* The scalars word of an invoke: method, then counts of input and output buffers. */
#define REMOTE_SCALARS_METHOD(sc) (((sc) >> 24) & 0x1f)
#define REMOTE_SCALARS_INBUFS(sc) (((sc) >> 16) & 0xff)
#define REMOTE_SCALARS_OUTBUFS(sc) (((sc) >> 8) & 0xff)

#define AEE_SUCCESS 0
#define AEE_EFAILED 1
#define AEE_ENOMEMORY 2
#define AEE_EBADPARM 14
#define AEE_EUNSUPPORTED 20

/* HAP_mem.h: the DSP-side address of a buffer the host mapped with fastrpc_mmap. */
int HAP_mmap_get(int fd, void **vaddr, uint64 *paddr);
int HAP_mmap_put(int fd);

/* The DSP runtime's allocator. */
void *calloc(size_t n, size_t size);
void *memalign(size_t align, size_t size);
void free(void *p);

/* iface.idl as qaic renders it (iface.h): the structs and the methods the skel serves. */
typedef struct dspt_hello_t {
    uint32_t magic, abi_version, sizeof_desc, offsetof_rng, offsetof_status, offsetof_cost;
    uint32_t op_mask, arena_bytes;
} dspt_hello_t;

typedef struct dspt_reply_t {
    uint32_t magic, status, done, reserved;
} dspt_reply_t;

int dsptrain_open(const char *uri, remote_handle64 *handle);
int dsptrain_close(remote_handle64 handle);
int dsptrain_hello(remote_handle64 handle, int fd, unsigned int bytes, dspt_hello_t *info);
int dsptrain_run(remote_handle64 handle, int fd, unsigned int first, unsigned int count,
                 dspt_reply_t *reply);

/* The entry FastRPC calls (named in the host's URI): method 0 open, 1 close, then the
 * interface's methods in order (2 hello, 3 run); in-scalars packed in input buffer 0,
 * the rout struct in output buffer 0 (qaic's layout for these signatures). */
int dsptrain_skel_handle_invoke(remote_handle64 handle, uint32_t sc, remote_arg *args);

#endif
