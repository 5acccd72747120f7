/* ops.h: the one contract between the dsptrain host and the Hexagon DSP.
 *
 * Everything the host and the DSP exchange is described here: op codes, dtypes,
 * statuses, rounding modes and the fixed-layout op descriptor. The host mirrors
 * this file with ctypes (runtime/backends/dsp_abi.py); the emulated server reports
 * sizeof/offsetof at its handshake so a mismatch is caught before any op runs.
 * Plain C, fixed-width fields only, no pointers: descriptors live in a memory
 * arena shared by both sides, and tensors are named by byte offsets into it.
 */
#ifndef DSPTRAIN_OPS_H
#define DSPTRAIN_OPS_H

#include <stdint.h>

#define DSPT_ABI_VERSION 4u
#define DSPT_MAGIC 0x44535054u /* "DSPT" */

/* Op codes. The DSP answers DSPT_NO_SUPPORT for a code it does not know. */
enum dspt_op {
    DSPT_OP_NOP = 0,
    DSPT_OP_GEMM_S8 = 1,            /* in0 a[M,K] i8, in1 b[N,K] i8 -> out0 c[M,N] i32 = a @ b.T */
    DSPT_OP_CONV2D_S8 = 2,          /* in0 x[N,H,W,C], in1 w[O,KH,KW,C] -> out0 y[N,OH,OW,O] i32 */
    DSPT_OP_CONV2D_BWD_DATA_S8 = 3, /* in0 err[N,OH,OW,O], in1 w[O,KH,KW,C] -> out0 dx[N,H,W,C] i32 */
    DSPT_OP_CONV2D_BWD_WEIGHT_S8 = 4, /* in0 err[N,OH,OW,O], in1 x[N,H,W,C] -> out0 dw[O,KH,KW,C] i32 */
    DSPT_OP_REQUANT = 5,            /* in0 acc i32 (n elems) -> out0 i8; shift given or estimated */
    DSPT_OP_ABSMAX = 6,             /* in0 acc i32 -> result_absmax */
    DSPT_OP_RELU_S8 = 7,            /* in0 x i8 -> out0 i8 */
    DSPT_OP_RELU_BWD_S8 = 8,        /* in0 err i8, in1 y i8 -> out0 i8 */
    DSPT_OP_MAXPOOL_S8 = 9,         /* in0 x[N,H,W,C] -> out0 y[N,OH,OW,C] i8, out1 argmax u8 */
    DSPT_OP_MAXPOOL_BWD_S8 = 10,    /* in0 err[N,OH,OW,C], in1 argmax u8 -> out0 dx[N,H,W,C] i8 */
    DSPT_OP_NITI_UPDATE_S8 = 11,    /* in0 w i8, in1 grad i32 -> out0 w' i8 (mu in `bits`) */
    DSPT_OP_DEBUG_SLEEP = 12,       /* sleeps `shift` milliseconds: lets tests hang the server */
    DSPT_OP_DEBUG_CRASH = 13,       /* exits the server without answering */
    /* Depthwise (one filter per channel, multiplier 1): w is tap-major, w[t, c] with
     * t = kh * KW + kw (shape_b = (KH, KW, C, 1)): the host hands the (C, KH, KW, 1)
     * weights over transposed (C * KH * KW bytes), the lanes' order. */
    DSPT_OP_DWCONV2D_S8 = 14,       /* in0 x[N,H,W,C], in1 w[KH,KW,C] -> out0 y[N,OH,OW,C] i32 */
    DSPT_OP_DWCONV2D_BWD_DATA_S8 = 15,   /* in0 err[N,OH,OW,C], in1 w[KH,KW,C] -> out0 dx[N,H,W,C] i32 */
    DSPT_OP_DWCONV2D_BWD_WEIGHT_S8 = 16, /* in0 err[N,OH,OW,C], in1 x[N,H,W,C] -> out0 dw[KH,KW,C] i32 */
    DSPT_OP_COUNT = 17
};

enum dspt_dtype { DSPT_I8 = 1, DSPT_U8 = 2, DSPT_I32 = 3, DSPT_I64 = 4 };

/* Statuses: "not supported" is not an error; the host falls back without warning. */
enum dspt_status { DSPT_OK = 0, DSPT_NO_SUPPORT = 1, DSPT_BAD_PARAMS = 2, DSPT_INTERNAL = 3 };

enum dspt_round { DSPT_ROUND = 0, DSPT_PSTO = 1, DSPT_STO = 2 };

/* Which path a convolution product took, written to `result_shift` (tests pin a shape's
 * path with it: a shape that stops taking its kernel fails there, not only in a bench);
 * the other products leave it 0. */
enum dspt_path {
    DSPT_PATH_NONE = 0,
    /* depthwise (dwconv.c, dwconv_wgrad.c) */
    DSPT_PATH_DW_FLAT = 1,        /* stride 1: padded rows as they are, weights by residue */
    DSPT_PATH_DW_BLOCKS = 2,      /* one 128-channel block of a pixel a vector */
    DSPT_PATH_DW_CLASSES = 3,     /* backward data of stride s: each (h, w) mod s class its taps */
    DSPT_PATH_DW_IMAGE_QUADS = 4, /* weight gradient: 4 images a word, vrmpy */
    DSPT_PATH_DW_COLUMN_QUADS = 5, /* stride 1 or 2, 3 kernel rows: 4 columns a word, vrmpy */
    /* dense (conv.c picks; the conv_*_fits functions of conv.h say when) */
    DSPT_PATH_POINTWISE = 6,      /* 1 x 1 conv: the GEMM on the pixels as they lie, no im2col */
    DSPT_PATH_CONV_TAPS = 7,      /* conv_taps.c: 1 channel, 4-7 outputs, 4 pixels x 8 channel slots */
    DSPT_PATH_CONV_LANES = 8,     /* conv_lanes.c: output pixels in the lanes (C <= 4) */
    DSPT_PATH_CONV_GRID = 9,      /* conv_grid.c: the padded grid in the lanes (forward, backward data) */
    DSPT_PATH_CONV_PADDED = 10,   /* conv_padded.c: the channel-padded image read in place */
    DSPT_PATH_IM2COL_GEMM = 11,   /* conv.c: im2col rows in chunks times packed w */
    DSPT_PATH_FLIPPED_GEMM = 12,  /* conv.c, backward data of stride 1: im2col of err times flipped wT */
    DSPT_PATH_GATHER_GEMM = 13,   /* conv.c, backward data: gathered err windows times wT */
    DSPT_PATH_COL2IM = 14,        /* conv_col2im.c: backward data as GEMM into window rows, then add */
    DSPT_PATH_PLANAR = 15,        /* conv_planar.c: weight gradient from channel planes */
    DSPT_PATH_WGRAD_GEMM = 16,    /* conv.c: weight gradient as im2col rows reduced over positions */
    DSPT_PATH_DW_PIXEL_QUADS = 17, /* dwconv_pixels.c: each output pixel's inside taps, 4 a vrmpy word */
    DSPT_PATH_DW_ERR_QUADS = 18,  /* dwconv_bwd2.c: backward data 3 x 3 stride 2: 4 err pixels a word */
    /* 19: the 2 x 2 block quads (forward 3 x 3 stride 2), replaced by DSPT_PATH_DW_COLUMN_TRIPLES */
    DSPT_PATH_POINTWISE_STRIDED = 20, /* conv_pointwise.c: backward data of 1 x 1, stride > 1: dx rows s*C apart */
    DSPT_PATH_DW_IMAGE_PAIRS = 21, /* dwconv_wgrad_pairs.c: weight gradient of <= 4 pixels: a register a pixel pair */
    DSPT_PATH_WGRAD_OUTPUTS = 22, /* conv_pointwise.c: weight gradient of 1 x 1, one pass: the threads split dw */
    DSPT_PATH_POINTWISE_PIXELS = 23, /* conv_pointwise.c: 1 x 1 onto 16 channels, the pixels in the lanes */
    DSPT_PATH_DW_COLUMN_TRIPLES = 24, /* dwconv_fwd2.c: forward 3 x 3 stride 2: a column's 3 rows a word */
    DSPT_PATH_DW_ERR_PAIRS = 28,  /* dwconv_bwd2_pairs.c: backward data 3 x 3 stride 2: dx pixel pairs as aligned vectors */
    DSPT_PATH_DW_ERR_ONE = 29,    /* dwconv_bwd_one.c: backward data from a 1 x 1 err: each dx pixel err x its one tap */
    DSPT_PATH_DW_IMAGE_ROWS = 32, /* dwconv_wgrad_rows.c: the image quads' 3 x 3 rows as modulo-scheduled packets */
    DSPT_PATH_DW_QUAD_PACKETS = 40, /* dwconv_quads.c: the column quads' stride-1 rows as modulo-scheduled packets */
    DSPT_PATH_DW_TRIPLE_PACKETS = 41, /* dwconv_fwd2.c: the column triples' stride-2 rows of 96 channels as packets */
    DSPT_PATH_DW_ERR_PACKETS = 44, /* dwconv_bwd2_packets.c: the err pairs' anchor rows of 96 channels as packets */
    DSPT_PATH_DW_ERR_144 = 48,    /* dwconv_bwd2_144.c: the err pairs at 144 channels, two passes in packets */
};

/* `shift` value asking the DSP to estimate it from the range (NITI's absmax rule). */
#define DSPT_SHIFT_ESTIMATE (-1)

/* Counter-based RNG key of numerics.RngKey: element i draws
 * threefry2x32_20(key=(seed, tensor_id), counter=(offset + i, step)).x0 */
struct dspt_rng {
    uint32_t seed, step, tensor_id, offset;
};

/* HVX contexts an op's work may be split across (v66 has 4; the descriptor's `threads`). */
#define DSPT_MAX_THREADS 8

/* What one op cost on the DSP, from QEMU's c20/c21/c22 (packets, instructions,
 * HVX instructions); on a device: pcycles in `packets`, zeros elsewhere.
 * The op's work is split across the descriptor's `threads` hardware threads (worker
 * threads of the DSP server, threads.h), each counting its own share: `thread_packets[t]`
 * is what thread t ran, `packets` the calling thread's serial part plus all shares, and
 * `critical` the serial part plus the longest share of each split (an op may split more
 * than once, e.g. its product and then the join of partial sums): the op's time with the
 * threads running side by side. */
struct dspt_cost {
    uint32_t packets, insns, hvx, critical;
    uint32_t thread_packets[DSPT_MAX_THREADS];
};

#define DSPT_MAX_IN 2
#define DSPT_MAX_OUT 2

/* One op. The host fills everything above `status` and `threads`; the DSP writes
 * `status`, the `result_*` fields and `cost`. Shapes are NHWC / row-major, unused dims 1. */
struct dspt_op_desc {
    uint32_t op;                    /* enum dspt_op */
    uint32_t dtype;                 /* dtype of in0 (REQUANT/ABSMAX: I32 or I64) */
    uint32_t in[DSPT_MAX_IN];       /* byte offsets into the arena */
    uint32_t out[DSPT_MAX_OUT];
    int32_t shape_a[4];             /* in0 shape */
    int32_t shape_b[4];             /* in1 shape */
    int32_t shape_out[4];           /* out0 shape */
    int32_t stride, pad, kernel_h, kernel_w;
    int32_t round_mode;             /* enum dspt_round */
    int32_t shift;                  /* >= 0, or DSPT_SHIFT_ESTIMATE */
    int32_t bits;                   /* REQUANT: target bits (8); NITI_UPDATE: mu */
    uint32_t flags;                 /* DSPT_F_* */
    struct dspt_rng rng;
    int32_t status;                 /* enum dspt_status, written by the DSP */
    int32_t result_shift;           /* the shift used (NITI_UPDATE: -1 = zero gradient; convolution
                                       products: the enum dspt_path taken) */
    uint32_t result_absmax;         /* max |acc| seen (REQUANT estimate, ABSMAX, NITI_UPDATE; a checked
                                       given shift: when the range was read, else 0) */
    uint32_t threads;               /* HVX contexts to split the work across (0, 1: one) */
    struct dspt_cost cost;
};

#define DSPT_F_ACCUMULATE 1u        /* GEMM/conv: out0 += product instead of = */
#define DSPT_F_SATURATE_CHECK 2u    /* REQUANT with a given shift: if max|acc| needs a larger
                                       shift (the given one would saturate), use that one and
                                       report it in result_shift (base.py's requantize rule) */

/* The arena: [control block][op ring][tensors...]. */
#define DSPT_RING_SLOTS 64u
#define DSPT_RING_OFFSET 4096u
#define DSPT_TENSOR_OFFSET (DSPT_RING_OFFSET + 65536u)
#define DSPT_ALIGN 128u

/* Emulated transport: fixed-size records over the server's stdin/stdout pipes. */
enum dspt_cmd_code { DSPT_CMD_RUN = 1, DSPT_CMD_QUIT = 2 };

struct dspt_cmd {                   /* host -> DSP */
    uint32_t magic, cmd, first, count;  /* run ring slots first .. first+count-1 */
};

struct dspt_reply {                 /* DSP -> host, one per command */
    uint32_t magic, status, done, reserved;  /* worst status, ops completed */
};

struct dspt_hello {                 /* DSP -> host, once at start */
    uint32_t magic, abi_version;
    uint32_t sizeof_desc, offsetof_rng, offsetof_status, offsetof_cost;
    uint32_t op_mask;               /* bit i set: op code i is implemented */
    uint32_t arena_bytes;           /* size the server mapped */
};

#endif /* DSPTRAIN_OPS_H */
