/* main.c: the emulated DSP server, a static Hexagon ELF run under qemu-hexagon.
 *
 * usage: dsp_server ARENA_PATH ARENA_BYTES [SCRATCH_BYTES]
 * Maps the host's arena file shared (control page, op ring, tensors), says hello
 * with its ABI layout and op table on stdout, then answers `struct dspt_cmd`s from
 * stdin: each RUN executes ring slots in order, stopping at the first failure, and
 * replies with the worst status and how many ops completed. EOF on stdin ends it.
 */
#include "dsp_sys.h"
#include "kernels.h"
#include "threads.h"

#define AT_FDCWD (-100)
#define O_RDWR 2
#define PROT_RW 3
#define MAP_SHARED 1
#define MAP_PRIVATE_ANON 0x22
#define DEFAULT_SCRATCH (64u << 20)

static int read_full(void *buf, uint32_t n)
{
    uint8_t *p = buf;
    while (n) {
        long r = dsp_syscall3(SYS_read, 0, p, n);
        if (r <= 0) return -1;
        p += r; n -= (uint32_t)r;
    }
    return 0;
}

static void write_full(const void *buf, uint32_t n)
{
    const uint8_t *p = buf;
    while (n) {
        long r = dsp_syscall3(SYS_write, 1, p, n);
        if (r <= 0) dsp_syscall3(SYS_exit_group, 71, 0, 0);
        p += r; n -= (uint32_t)r;
    }
}

static uint32_t parse_u32(const char *s)
{
    uint32_t v = 0;
    while (*s >= '0' && *s <= '9') v = v * 10 + (uint32_t)(*s++ - '0');
    return v;
}

static void *map(long len, long prot, long flags, long fd)
{
    long p = dsp_syscall6(SYS_mmap, 0, len, prot, flags, fd, 0);
    return (p < 0 && p > -4096) ? 0 : (void *)p;
}

static int serve(int argc, char **argv)
{
    if (argc < 3) return 64;
    struct dspt_ctx ctx = {0};
    ctx.arena_bytes = parse_u32(argv[2]);
    ctx.scratch_bytes = argc > 3 ? parse_u32(argv[3]) : DEFAULT_SCRATCH;
    long fd = dsp_syscall6(SYS_openat, AT_FDCWD, (long)argv[1], O_RDWR, 0, 0, 0);
    if (fd < 0) return 66;
    ctx.arena = map(ctx.arena_bytes, PROT_RW, MAP_SHARED, fd);
    ctx.scratch = map(ctx.scratch_bytes, PROT_RW, MAP_PRIVATE_ANON, -1);
    ctx.pool = dspt_pool_create(ctx.scratch_bytes);   /* each worker's scratch as large (untouched pages cost nothing) */
    if (!ctx.arena || !ctx.scratch || !ctx.pool) return 67;

    struct dspt_hello hello = {
        DSPT_MAGIC, DSPT_ABI_VERSION, sizeof(struct dspt_op_desc),
        __builtin_offsetof(struct dspt_op_desc, rng),
        __builtin_offsetof(struct dspt_op_desc, status),
        __builtin_offsetof(struct dspt_op_desc, cost),
        dspt_op_mask(), ctx.arena_bytes,
    };
    write_full(&hello, sizeof hello);

    struct dspt_op_desc *ring = (struct dspt_op_desc *)(ctx.arena + DSPT_RING_OFFSET);
    struct dspt_cmd cmd;
    while (read_full(&cmd, sizeof cmd) == 0) {
        struct dspt_reply reply = {DSPT_MAGIC, DSPT_OK, 0, 0};
        if (cmd.magic != DSPT_MAGIC) return 65;
        if (cmd.cmd == DSPT_CMD_QUIT) {
            dspt_pool_stop(ctx.pool);   /* the workers end and are joined, as a session's close does on a device */
            return 0;
        }
        if (cmd.first >= DSPT_RING_SLOTS || cmd.count > DSPT_RING_SLOTS - cmd.first)
            reply.status = DSPT_BAD_PARAMS;
        for (uint32_t i = 0; reply.status == DSPT_OK && i < cmd.count; i++) {
            reply.status = (uint32_t)dspt_run_op(&ctx, &ring[cmd.first + i]);
            if (reply.status == DSPT_OK) reply.done++;
        }
        write_full(&reply, sizeof reply);
    }
    return 0;
}

void __attribute__((noreturn, used)) dspt_start(long *sp)
{
    int status = serve((int)sp[0], (char **)(sp + 1));
    dsp_syscall3(SYS_exit_group, status, 0, 0);
    for (;;) {}
}

/* The kernel enters with r29 -> argc, argv[], envp[]. */
__asm__(".globl _start\n_start:\n  r0 = r29\n  r29 = and(r29, #-128)\n  call dspt_start\n");
