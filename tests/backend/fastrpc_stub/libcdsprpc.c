/* A stand-in libcdsprpc.so for tests: the entry points runtime/backends/dsp_fastrpc.py
 * calls, forwarding every invoke to the emulated DSP server (dsp_kernels/main.c under
 * qemu-hexagon), so each line of the ctypes FastRPC transport runs without a phone.
 *
 *   rpcmem_alloc        a shared file in /dev/shm, mapped here; its fd is the buffer's fd
 *   fastrpc_mmap        records the buffer the "DSP" will see (the server maps that file)
 *   remote_handle64_open/close      start on the first invoke / stop the server
 *   remote_handle64_invoke          method 2 (hello): start the server on the arena's file
 *                                   and hand back its hello; method 3 (run): one command
 *                                   on its stdin, the reply from its stdout
 * The server and qemu come from DSPTRAIN_STUB_SERVER and DSPTRAIN_STUB_QEMU; the shared
 * files are named /dev/shm/$DSPTRAIN_STUB_SHM-<pid>-<n> (default prefix dsptrain-stub), so
 * the test that set the prefix removes whatever a killed process left. Return codes
 * follow FastRPC: 0 is success, anything else a failure. Plain C, built with gcc by
 * tests/backend/test_dsp_fastrpc.py. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_BUFS 16
#define HANDLE_MAGIC 0xD5B7u

struct rpcbuf { void *ptr; size_t len; int fd; char path[96]; };
static struct rpcbuf bufs[MAX_BUFS];
static int mapped_fd = -1;
static pid_t server = -1;
static int to_server = -1, from_server = -1;

typedef struct { void *pv; size_t nLen; } remote_buf;
typedef union { remote_buf buf; uint32_t h; uint64_t h64; } remote_arg;

void *rpcmem_alloc(int heapid, uint32_t flags, int size)
{
    (void)heapid; (void)flags;
    for (int i = 0; i < MAX_BUFS; i++) {
        if (bufs[i].ptr) continue;
        struct rpcbuf *b = &bufs[i];
        const char *prefix = getenv("DSPTRAIN_STUB_SHM");
        if (!prefix || !*prefix || strchr(prefix, '/') || strlen(prefix) > 48) prefix = "dsptrain-stub";
        snprintf(b->path, sizeof b->path, "/dev/shm/%s-%d-%d", prefix, (int)getpid(), i);
        int fd = open(b->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) return NULL;
        void *p = ftruncate(fd, size) == 0
                      ? mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (p == MAP_FAILED) { close(fd); unlink(b->path); return NULL; }
        b->ptr = p; b->len = (size_t)size; b->fd = fd;
        return p;
    }
    return NULL;
}

static struct rpcbuf *by_ptr(void *p)
{
    for (int i = 0; i < MAX_BUFS; i++)
        if (bufs[i].ptr && bufs[i].ptr == p) return &bufs[i];
    return NULL;
}

static struct rpcbuf *by_fd(int fd)
{
    for (int i = 0; i < MAX_BUFS; i++)
        if (bufs[i].ptr && bufs[i].fd == fd) return &bufs[i];
    return NULL;
}

int rpcmem_to_fd(void *p)
{
    struct rpcbuf *b = by_ptr(p);
    return b ? b->fd : -1;
}

void rpcmem_free(void *p)
{
    struct rpcbuf *b = by_ptr(p);
    if (!b) return;
    munmap(b->ptr, b->len);
    close(b->fd);
    unlink(b->path);
    memset(b, 0, sizeof *b);
}

int remote_session_control(uint32_t req, void *data, uint32_t len)
{
    (void)data; (void)len;
    return req == 7 ? 0 : -1;   /* DSPRPC_CONTROL_UNSIGNED_MODULE only */
}

int fastrpc_mmap(int domain, int fd, void *addr, int offset, size_t length, int flags)
{
    (void)domain; (void)offset; (void)flags;
    struct rpcbuf *b = by_fd(fd);
    if (!b || b->ptr != addr || length > b->len) return EINVAL;
    mapped_fd = fd;
    return 0;
}

int fastrpc_munmap(int domain, int fd, void *addr, size_t length)
{
    (void)domain; (void)addr; (void)length;
    if (fd != mapped_fd) return EINVAL;
    mapped_fd = -1;
    return 0;
}

static void stop_server(void)
{
    if (server > 0) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
    }
    if (to_server >= 0) close(to_server);
    if (from_server >= 0) close(from_server);
    server = -1; to_server = from_server = -1;
}

static int start_server(struct rpcbuf *arena)
{
    const char *elf = getenv("DSPTRAIN_STUB_SERVER"), *qemu = getenv("DSPTRAIN_STUB_QEMU");
    int in[2], out[2];
    char bytes[32];
    if (!elf || !qemu || pipe(in) || pipe(out)) return EINVAL;
    snprintf(bytes, sizeof bytes, "%zu", arena->len);
    server = fork();
    if (server < 0) return errno;
    if (server == 0) {
        dup2(in[0], 0); dup2(out[1], 1);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        execl(qemu, qemu, elf, arena->path, bytes, (char *)NULL);
        _exit(127);
    }
    close(in[0]); close(out[1]);
    to_server = in[1]; from_server = out[0];
    return 0;
}

static int read_full(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r <= 0) return -1;
        c += r; n -= (size_t)r;
    }
    return 0;
}

int remote_handle64_open(const char *uri, uint64_t *handle)
{
    if (!uri || strncmp(uri, "file:///libdsptrain_skel.so?", 28) != 0) return EINVAL;
    *handle = HANDLE_MAGIC;
    return 0;
}

int remote_handle64_close(uint64_t handle)
{
    if (handle != HANDLE_MAGIC) return EINVAL;
    stop_server();
    return 0;
}

int remote_handle64_invoke(uint64_t handle, uint32_t sc, remote_arg *args)
{
    uint32_t method = (sc >> 24) & 0x1f, nin = (sc >> 16) & 0xff, nout = (sc >> 8) & 0xff;
    if (handle != HANDLE_MAGIC || nin != 1 || nout != 1) return EINVAL;
    const int32_t *in = args[0].buf.pv;
    if (method == 2) {             /* hello(arena_fd, arena_bytes) -> dspt_hello */
        struct rpcbuf *arena = by_fd(in[0]);
        if (!arena || in[0] != mapped_fd || args[1].buf.nLen != 32) return EINVAL;
        stop_server();
        int rc = start_server(arena);
        if (rc) return rc;
        return read_full(from_server, args[1].buf.pv, 32) ? EIO : 0;
    }
    if (method == 3) {             /* run(arena_fd, first, count) -> dspt_reply */
        uint32_t cmd[4] = {0x44535054u, 1u, (uint32_t)in[1], (uint32_t)in[2]};
        if (server <= 0 || in[0] != mapped_fd || args[1].buf.nLen != 16) return EINVAL;
        if (write(to_server, cmd, sizeof cmd) != (ssize_t)sizeof cmd) return EPIPE;
        return read_full(from_server, args[1].buf.pv, 16) ? EIO : 0;
    }
    return EINVAL;
}
