/* gemm.c: int8 GEMM c = a @ b.T on HVX, the core every product op reduces to.
 *
 * Vx.w += vrmpy(Vu.ub, Rt.b) multiplies 4 unsigned bytes per 32-bit lane of a vector
 * by the 4 signed bytes of a scalar register and sums them: a vector holding 4
 * reduction steps of 32 output columns ("packed b": block of 32 columns x 4 k) times
 * one word of a row of `a` adds 128 MACs to 32 accumulators. This vector-by-scalar
 * form needs no vsplat (which would take a slot 2/3 multiply resource like vrmpy
 * itself: Hexagon V66 HVX Programmer's Reference, VLIW packing rules), so two
 * vrmpy issue per packet. b is signed, so it is packed biased (b + 128 as ub) and the
 * bias comes back out exactly: sum (b + 128) a = sum b a + 128 sum a, and the
 * accumulators start at -128 * rowsum(a). The usual HVX int8 matmul layout (as in
 * Qualcomm's hexagon_nn, XNNPACK's Hexagon path and ggml-hexagon); the code is ours.
 * Register tile: 4 rows x up to 4 column blocks = 16 accumulators.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "threads.h"

#define BIAS_WORD 0x80808080u

#define BYTES8(i) i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7
#define BYTES32(i) BYTES8(i), BYTES8(i + 8), BYTES8(i + 16), BYTES8(i + 24)
static const uint8_t byte_index[128] __attribute__((aligned(128))) = {BYTES32(0), BYTES32(32), BYTES32(64), BYTES32(96)};
#undef BYTES32
#undef BYTES8

uint32_t dspt_packed_b_bytes(int n, int k)
{
    return (uint32_t)((n + 31) / 32) * (uint32_t)((k + 3) / 4) * HVX_BYTES;
}

/* Stages 8, 4, 2, 1 of a 32 x 32 word transpose on 16 rows of one half (the rows' index
 * bits below 16), then words 0 .. words-1 of the result biased (b + 128: bytewise, so it
 * commutes with the transpose), lanes past the block's rows replaced by `pad`, and stored
 * to dst. Stage w exchanges bit w of the row and of the column index: vshuff(v[r + w],
 * v[r], 4w) swaps word c + w of v[r] with word c of v[r + w]. Exchanges of different
 * bits commute, so the halves can be finished one at a time, in registers. */
static inline __attribute__((always_inline)) void transpose_half(HVX_Vector v[16], HVX_Vector *dst, int words,
                                                                 HVX_Vector bias, HVX_VectorPred rows, HVX_Vector pad)
{
#pragma clang loop unroll(full)
    for (int w = 8; w >= 1; w >>= 1)
#pragma clang loop unroll(full)
        for (int r = 0; r < 16; r++) {
            if (r & w) continue;
            HVX_VectorPair p = Q6_W_vshuff_VVR(v[r + w], v[r], 4 * w);
            v[r] = Q6_V_lo_W(p);
            v[r + w] = Q6_V_hi_W(p);
        }
#pragma clang loop unroll(full)
    for (int r = 0; r < 16; r++) v[r] = Q6_V_vmux_QVV(rows, Q6_V_vxor_VV(v[r], bias), pad);
    if (words >= 16) {
#pragma clang loop unroll(full)
        for (int r = 0; r < 16; r++) dst[r] = v[r];
        return;
    }
#pragma clang loop unroll(full)
    for (int r = 0; r < 16; r++)
        if (r < words) dst[r] = v[r];
}

/* One chunk of the packer: 32 rows (the block's `lanes` from `rows`, sn bytes apart;
 * rows past them read the last one again and are replaced after the transpose) x `words`
 * words of which the first `bytes` are k's, into dst[0 .. words-1]. Stage 16 first pairs
 * row r with row r + 16; each half is then finished in registers, the upper one only
 * when the chunk has more than 16 words (a ragged K's last chunk often has one or two). */
static inline __attribute__((always_inline)) void pack_chunk_body(HVX_Vector *dst, const int8_t *rows, int sn,
                                                                  int lanes, int words, int bytes, const int paired)
{
    HVX_Vector v[16], upper[16], bias = Q6_V_vsplat_R((int)BIAS_WORD);
    HVX_Vector pad = lanes < 32 ? dspt_ones_lane(bias, lanes) : bias;   /* zeros, the 1s lane */
    HVX_VectorPred real = Q6_Q_vsetq2_R(4 * lanes);
    const int8_t *last = rows + (lanes - 1) * sn;
#pragma clang loop unroll(full)
    for (int r = 0; r < 16; r++) {
        /* paired: lane r takes row 2r, lane r + 16 row 2r + 1 (dspt_pack_b_paired) */
        const int8_t *lo = rows + (paired ? 2 * r : r) * sn, *hi = rows + (paired ? 2 * r + 1 : r + 16) * sn;
        HVX_VectorPair p = Q6_W_vshuff_VVR(hvx_load_u(hi < last ? hi : last), hvx_load_u(lo < last ? lo : last), 64);
        v[r] = Q6_V_lo_W(p);
        upper[r] = Q6_V_hi_W(p);
    }
    transpose_half(v, dst, words, bias, real, pad);
    if (words > 16) {
#pragma clang loop unroll(full)
        for (int r = 0; r < 16; r++) v[r] = upper[r];
        transpose_half(v, dst + 16, words - 16, bias, real, pad);
    }
    if (bytes % 4) {   /* k's ragged last word: its bytes past k are zeros (the 1s lane keeps 1s) */
        HVX_VectorPred kept = Q6_Q_vand_VR(Q6_V_vsplat_R((int)(0xFFFFFFFFu >> (8 * (4 - bytes % 4)))), -1);
        HVX_Vector *w = dst + words - 1;
        *w = Q6_V_vmux_QVV(real, Q6_V_vmux_QVV(kept, *w, bias), pad);
    }
}

/* The packer's two row orders, each compiled on its own (paired: dspt_pack_b_paired). */
static __attribute__((noinline)) void pack_chunk(HVX_Vector *dst, const int8_t *rows, int sn, int lanes, int words,
                                                 int bytes)
{
    pack_chunk_body(dst, rows, sn, lanes, words, bytes, 0);
}

static __attribute__((noinline)) void pack_chunk_paired(HVX_Vector *dst, const int8_t *rows, int sn, int words,
                                                        int bytes)
{
    pack_chunk_body(dst, rows, sn, 32, words, bytes, 1);
}

/* Pack rows i (stride sn bytes, k contiguous bytes each) of an n x k operand into
 * [n/32 blocks][k/4][32 lanes][4 bytes], biased by 128, zero (128) padded, and 1s in
 * lane n % 32 of the last block (the row sums): 32 rows x 32 words at a time, loaded
 * as vectors and transposed with vshuff (pack_chunk). */
void dspt_pack_b(int8_t *bp, const int8_t *src, int n, int k, int sn)
{
    int k4 = (k + 3) / 4, nblocks = (n + 31) / 32;
    for (int nb = 0; nb < nblocks; nb++) {
        int lanes = n - nb * 32 < 32 ? n - nb * 32 : 32;
        for (int q0 = 0; q0 < k4; q0 += 32)
            pack_chunk((HVX_Vector *)bp + nb * k4 + q0, src + nb * 32 * sn + q0 * 4, sn, lanes,
                       k4 - q0 < 32 ? k4 - q0 : 32, k - q0 * 4 < HVX_BYTES ? k - q0 * 4 : HVX_BYTES);
    }
}

void dspt_pack_b_paired(int8_t *bp, const int8_t *src, int n, int k, int sn)
{
    int k4 = (k + 3) / 4;
    for (int nb = 0; nb < n / 32; nb++)
        for (int q0 = 0; q0 < k4; q0 += 32)
            pack_chunk_paired((HVX_Vector *)bp + nb * k4 + q0, src + nb * 32 * sn + q0 * 4, sn,
                              k4 - q0 < 32 ? k4 - q0 : 32, k - q0 * 4 < HVX_BYTES ? k - q0 * 4 : HVX_BYTES);
}

/* Partial sums (32 lanes) of the bytes of words 0 .. k4-1 of one row, each byte + 128. */
static inline HVX_Vector row_part(const int8_t *row, int bytes, HVX_Vector flip)
{
    const int ones = 0x01010101;
    HVX_Vector acc = Q6_V_vzero();
    for (int i = 0; i < bytes; i += HVX_BYTES) {
        int n = bytes - i < HVX_BYTES ? bytes - i : HVX_BYTES;
        HVX_Vector v = Q6_V_vxor_VV(hvx_load_u(row + i), flip);   /* masked below */
        acc = Q6_Vw_vrmpyacc_VwVubRb(acc, Q6_V_vmux_QVV(Q6_Q_vsetq2_R(n), v, Q6_V_vzero()), ones);
    }
    return acc;
}

/* row_sums of 32 contiguous rows of K4 <= 16 words (K4 | 16): K4 vectors. */
static inline __attribute__((always_inline)) void row_sums32_body(const int K4, int32_t sums[32], const int8_t *a,
                                                                  HVX_Vector flip, HVX_Vector bias)
{
    /* 32 contiguous rows of K4 <= 16 words are K4 vectors: their words' byte sums
     * (vrmpy), then log2(K4) rounds of vdeal + add pair each row's neighbouring words
     * (row r's K4 words end as word r): K4 + 2 log2(K4) vector ops for 32 rows, not 32
     * rows' loads and masks and four reduce8 (MobileNetV2's 16 -> 96 expansion at 16 x 16:
     * a third of its forward packets). K4 compiled in: with it counted, v[] lived on the
     * stack (~97 packets a call, half of the 32 -> 16 backward data's packets) */
    HVX_Vector v[16];
#pragma clang loop unroll(full)
    for (int i = 0; i < K4; i++)
        v[i] = Q6_Vw_vrmpy_VubRb(Q6_V_vxor_VV(hvx_load_u(a + i * HVX_BYTES), flip), 0x01010101);
#pragma clang loop unroll(full)
    for (int n = K4; n > 1; n /= 2)
#pragma clang loop unroll(full)
        for (int i = 0; i < n / 2; i++) {
            HVX_VectorPair d = Q6_W_vdeal_VVR(v[2 * i + 1], v[2 * i], -4);
            v[i] = Q6_Vw_vadd_VwVw(Q6_V_lo_W(d), Q6_V_hi_W(d));
        }
    *(HVX_Vector *)sums = Q6_Vw_vsub_VwVw(v[0], bias);
}

/* row_sums32 of `groups` runs of 32 rows back to back (the depth-compiled cores' row
 * blocks: one call, not one through row_sums' frame per 32 rows, ~58 packets each) */
static __attribute__((noinline)) void row_sums32(int32_t *sums, const int8_t *a, int k4, int groups)
{
    HVX_Vector flip = Q6_V_vsplat_R((int)BIAS_WORD), bias = Q6_V_vsplat_R(128 * 4 * k4);
#define RUNS(K4) for (int i = 0; i < groups; i++) row_sums32_body(K4, sums + 32 * i, a + i * 32 * 4 * K4, flip, bias)
    switch (k4) {
    case 1: RUNS(1); break;
    case 2: RUNS(2); break;
    case 4: RUNS(4); break;
    case 8: RUNS(8); break;
    default: RUNS(16); break;
    }
#undef RUNS
}

/* row_sums of up to 32 rows of `bytes` contiguous bytes each (lda apart): each row's
 * chunks summed 4 bytes to a word by signed vrmpy against a vector of 1s (zeros past the
 * row's end in its last chunk), then the 32 rows' vectors folded into one, lane r row r's
 * sum: a fold of two vectors (vshuff by 64 >> s bytes, add) puts the first's pair sums in
 * the even elements and the second's in the odd, so a binary tree of 31 folds over the rows
 * in bit-reversed order (row bitrev5(i) at step i) leaves row r in lane r. About 1 vector
 * load and 1 vrmpy a row and chunk plus 2 ops a row for the tree, where 8 rows at a time
 * (reduce8) and their lanes read back one by one took ~12 packets a row (MobileNetV2's
 * projections onto 32 channels spent a third of their packets here). */
static inline __attribute__((always_inline)) void row_sums_fold(const int CHUNKS, int32_t sums[32], const int8_t *a,
                                                                int lda, int m, int bytes)
{
    HVX_Vector ones = Q6_V_vsplat_R(0x01010101);
    const int chunks = CHUNKS ? CHUNKS : (bytes + HVX_BYTES - 1) / HVX_BYTES, tail = bytes - (chunks - 1) * HVX_BYTES;
    HVX_Vector last_ones = Q6_V_vmux_QVV(Q6_Q_vsetq2_R(tail), ones, Q6_V_vzero());
    HVX_Vector level[5];
#pragma clang loop unroll(full)
    for (int i = 0; i < 32; i++) {
        const int row = (i & 1) << 4 | (i & 2) << 2 | (i & 4) | (i & 8) >> 2 | (i & 16) >> 4;   /* bitrev5(i) */
        const int8_t *p = a + (row < m ? row : m - 1) * lda;
        HVX_Vector v = Q6_Vw_vrmpy_VbVb(hvx_load_u(p + (chunks - 1) * HVX_BYTES), last_ones);
        if (CHUNKS) {
#pragma clang loop unroll(full)
            for (int c = 0; c < CHUNKS - 1; c++) v = Q6_Vw_vrmpyacc_VwVbVb(v, hvx_load_u(p + c * HVX_BYTES), ones);
        } else {   /* rows past FOLD_CHUNKS: clang's unrolled loop with its remainders cost more */
#pragma clang loop unroll(disable)
            for (int c = 0; c < chunks - 1; c++) v = Q6_Vw_vrmpyacc_VwVbVb(v, hvx_load_u(p + c * HVX_BYTES), ones);
        }
#pragma clang loop unroll(full)
        for (int s = 0; s < 5; s++) {
            if (!(i >> s & 1)) {
                level[s] = v;
                break;
            }
            HVX_VectorPair pr = Q6_W_vshuff_VVR(v, level[s], 64 >> s);
            v = Q6_Vw_vadd_VwVw(Q6_V_lo_W(pr), Q6_V_hi_W(pr));
        }
        if (i == 31) *(HVX_Vector *)sums = v;
    }
}

/* row_sums_fold with the chunks a row compiled in (rows up to 10 vectors: 1280 bytes,
 * MobileNetV2's deepest), or counted (0; rows of 5-10 vectors ran 3-17 packets a row slower
 * through the counted loop than unrolled) */
typedef void (*row_sums_fn)(int32_t *, const int8_t *, int, int, int);
#define FOLD_ROWS(CHUNKS) \
    static __attribute__((noinline)) void row_sums_fold##CHUNKS(int32_t *sums, const int8_t *a, int lda, int m, \
                                                                int bytes) \
    { row_sums_fold(CHUNKS, sums, a, lda, m, bytes); }
FOLD_ROWS(0) FOLD_ROWS(1) FOLD_ROWS(2) FOLD_ROWS(3) FOLD_ROWS(4) FOLD_ROWS(5) FOLD_ROWS(6) FOLD_ROWS(7) FOLD_ROWS(8)
FOLD_ROWS(9) FOLD_ROWS(10)
#undef FOLD_ROWS
#define FOLD_CHUNKS 10
static const row_sums_fn row_sums_folds[FOLD_CHUNKS + 1] = {
    row_sums_fold0, row_sums_fold1, row_sums_fold2, row_sums_fold3, row_sums_fold4,
    row_sums_fold5, row_sums_fold6, row_sums_fold7, row_sums_fold8, row_sums_fold9, row_sums_fold10};

/* sums[r] = sum of the signed bytes of words 0 .. k4-1 of rows r < m (m <= 32) of a:
 * the bias correction's factor, with vectors: bytes made unsigned (^ 0x80) are summed
 * 4 to a word by vrmpy with 0x01010101. Rows stored as the lanes of vectors (lda == 4,
 * aq == 32) sum lane-wise over q; rows stored as rows give a vector each, reduced
 * across lanes eight rows at a time (reduce8). */
static __attribute__((noinline)) void row_sums(int32_t sums[32], const int8_t *a, int lda, int aq, int m, int k4)
{
    HVX_Vector flip = Q6_V_vsplat_R((int)BIAS_WORD), bias = Q6_V_vsplat_R(128 * 4 * k4);
    if (lda == 4 && aq == 32) {
        HVX_Vector total = Q6_V_vzero();
        for (int q = 0; q < k4; q++)
            total = Q6_Vw_vrmpyacc_VwVubRb(total, Q6_V_vxor_VV(((const HVX_Vector *)a)[q], flip), 0x01010101);
        *(HVX_Vector *)sums = Q6_Vw_vsub_VwVw(total, bias);
        return;
    }
    if (lda == 4 * k4 && m == 32 && 16 % k4 == 0) {
        row_sums32(sums, a, k4, 1);
        return;
    }
    int bytes = 4 * k4;
    if (aq == 1) {   /* rows of contiguous bytes: folded 32 at a time */
        int chunks = (bytes + HVX_BYTES - 1) / HVX_BYTES;
        row_sums_folds[chunks <= FOLD_CHUNKS ? chunks : 0](sums, a, lda, m, bytes);
        return;
    }
    for (int r0 = 0; r0 < m; r0 += 8) {
        const int8_t *b = a + r0 * lda;
        int last = m - r0 - 1;   /* rows past m repeat a valid row; their sums are unused */
#define ROW(i) row_part(b + (i < last ? i : last) * lda, bytes, flip)
        HVX_Vector v = Q6_Vw_vsub_VwVw(hvx_reduce8(ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7)), bias);
#undef ROW
        const int32_t *lanes = (const int32_t *)&v;
        for (int j = 0; j < 8; j++) sums[r0 + j] = lanes[4 * j];
    }
}

/* Write (ACC: add) an accumulator vector to c: all 32 lanes; the first `cols` lanes
 * with the rest written back as they were read ("spilled": the lanes past cols are the
 * next row's, which this core call owns); or exactly the first `cols` lanes. */
static inline void store_full(const int ACC, int32_t *c, HVX_Vector v, int aligned)
{
    if (aligned) {   /* one vmem: clang makes an unaligned store vlalign and two masked stores */
        if (ACC) v = Q6_Vw_vadd_VwVw(v, *(HVX_Vector *)c);
        *(HVX_Vector *)c = v;
        return;
    }
    if (ACC) v = Q6_Vw_vadd_VwVw(v, hvx_load_u(c));
    hvx_store_u(c, v);
}

static inline void store_spilled(const int ACC, int32_t *c, HVX_Vector v, HVX_VectorPred keep)
{
    HVX_Vector old = hvx_load_u(c);
    hvx_store_u(c, Q6_V_vmux_QVV(keep, ACC ? Q6_Vw_vadd_VwVw(v, old) : v, old));
}

static inline void store_exact(const int ACC, int32_t *c, HVX_Vector v, int cols)
{
    if (ACC) v = Q6_Vw_vadd_VwVw(v, hvx_load_bytes(c, (uint32_t)cols * 4));
    hvx_store_bytes(c, v, (uint32_t)cols * 4);
}

/* Row layouts of a besides a stride per word (aq): WORDS, rows 4 bytes apart (pixels of
 * a channel-padded image) and word q at a table's offset (its window's taps): the rows
 * past a tile's last are read (their neighbours in the image) but never stored. */
#define WORDS (-1)

/* What every tile of one product shares. */
struct core {
    int ldc, lda, aq, k4;
    const int32_t *off;   /* layout WORDS: word q of row r at a + 4r + off[q] */
    void (*twelve)(const struct core *, int32_t *, const int8_t *, int, const HVX_Vector *, int32_t *, int);
    int cols_last;   /* columns of the last block */
    int ones;        /* the lane of 1s in the last block (n % 32), or -1 */
    int spill;       /* ldc == n: a row's last block may write whole vectors (store_acc) */
    int aligned;     /* c and ldc on 128 bytes (and any group's c_words): whole blocks stored with vmem */
    /* WORDS: every strip runs its rows once per group (kernels.h; conv_padded.c: an
     * image's output rows in one call) */
    const struct dspt_row_groups *rg;
};
#define TILE_LAST 1  /* the tile holds the product's last column block */
#define TILE_TAIL 2  /* the tile holds the core call's last row: its stores stay exact */

/* One column block over 4 contiguous rows on 8 bytes, `quads` x 4 words (quads >= 2), in
 * packets: each packet holds one row's two vrmpy (words q, q + 1: the even word into acc, the
 * odd into odd, so no accumulator takes two vrmpy a packet) and reloads that row's register
 * pair with its next two words (memd, post-increment; read before written within the packet),
 * so 4 packets cover 2 words of 4 rows and b's next two vectors load one a packet beside them.
 * The loads run one iteration ahead of the vrmpy: the loop is software-pipelined by hand
 * (modulo scheduling, B. R. Rau, "Iterative modulo scheduling", MICRO-27, 1994) with an
 * initiation interval of 8 packets for 16 vrmpy, HVX's bound (2 vrmpy a packet), where
 * clang-16 made 10 (tile's memd loop). The b vectors alternate between v0-v1 and v2-v3 so a
 * pair is reloaded only after its last use; the last 4 words run without loads, so nothing
 * past a row or b is read. Rows r6-r13 hold the 4 rows' pairs. Checked bit-exact by
 * tests/backend/test_dsp_pointwise.py (test_one_block_*: every quads % 4 and the rest words). */
static inline __attribute__((always_inline)) void one_block_words(const int32_t *p0, const int32_t *p1,
                                                                  const int32_t *p2, const int32_t *p3,
                                                                  const HVX_Vector *pb, int quads, HVX_Vector *c0,
                                                                  HVX_Vector *c1, HVX_Vector *c2, HVX_Vector *c3,
                                                                  HVX_Vector *o0, HVX_Vector *o1, HVX_Vector *o2,
                                                                  HVX_Vector *o3)
{
    HVX_Vector a0 = *c0, a1 = *c1, a2 = *c2, a3 = *c3, d0 = *o0, d1 = *o1, d2 = *o2, d3 = *o3;
    const int loops = quads - 1;
    /* one row's packet: vrmpy of its pair (lo, hi) by the b vectors (E, O), then `LOAD` */
#define PKT(ROW, LO, HI, E, O, LOAD) \
    "{ %[a" #ROW "].w += vrmpy(" E ".ub," LO ".b); %[d" #ROW "].w += vrmpy(" O ".ub," HI ".b)" LOAD " }"
#define LD(ROW, PAIR) "; " PAIR " = memd(%[p" #ROW "]++#8)"
#define LDB(V) "; " V " = vmem(%[pb]++#1)"
    __asm__ volatile(
        "{ r7:6 = memd(%[p0]++#8); v0 = vmem(%[pb]++#1) }\n"
        "{ r9:8 = memd(%[p1]++#8); v1 = vmem(%[pb]++#1); loop0(1f, %[loops]) }\n"
        "{ r11:10 = memd(%[p2]++#8); r13:12 = memd(%[p3]++#8) }\n"
        "1:\n"
        PKT(0, "r6", "r7", "v0", "v1", LD(0, "r7:6") LDB("v2")) "\n"
        PKT(1, "r8", "r9", "v0", "v1", LD(1, "r9:8") LDB("v3")) "\n"
        PKT(2, "r10", "r11", "v0", "v1", LD(2, "r11:10")) "\n"
        PKT(3, "r12", "r13", "v0", "v1", LD(3, "r13:12")) "\n"
        PKT(0, "r6", "r7", "v2", "v3", LD(0, "r7:6") LDB("v0")) "\n"
        PKT(1, "r8", "r9", "v2", "v3", LD(1, "r9:8") LDB("v1")) "\n"
        PKT(2, "r10", "r11", "v2", "v3", LD(2, "r11:10")) "\n"
        PKT(3, "r12", "r13", "v2", "v3", LD(3, "r13:12")) ":endloop0\n"
        PKT(0, "r6", "r7", "v0", "v1", LD(0, "r7:6") LDB("v2")) "\n"
        PKT(1, "r8", "r9", "v0", "v1", LD(1, "r9:8") LDB("v3")) "\n"
        PKT(2, "r10", "r11", "v0", "v1", LD(2, "r11:10")) "\n"
        PKT(3, "r12", "r13", "v0", "v1", LD(3, "r13:12")) "\n"
        PKT(0, "r6", "r7", "v2", "v3", "") "\n"
        PKT(1, "r8", "r9", "v2", "v3", "") "\n"
        PKT(2, "r10", "r11", "v2", "v3", "") "\n"
        PKT(3, "r12", "r13", "v2", "v3", "") "\n"
        : [p0] "+r"(p0), [p1] "+r"(p1), [p2] "+r"(p2), [p3] "+r"(p3), [pb] "+r"(pb), [a0] "+v"(a0), [a1] "+v"(a1),
          [a2] "+v"(a2), [a3] "+v"(a3), [d0] "+v"(d0), [d1] "+v"(d1), [d2] "+v"(d2), [d3] "+v"(d3)
        : [loops] "r"(loops)
        : "r6", "r7", "r8", "r9", "r10", "r11", "r12", "r13", "v0", "v1", "v2", "v3", "lc0", "sa0", "usr", "memory");
#undef PKT
#undef LD
#undef LDB
    *c0 = a0; *c1 = a1; *c2 = a2; *c3 = a3; *o0 = d0; *o1 = d1; *o2 = d2; *o3 = d3;
}

/* R rows from a (rows past `rows` repeat the last and are not stored) x NB column
 * blocks from b (blocks k4 vectors apart). `last`: the tile holds the product's last
 * block (flags TILE_LAST); with a lane of 1s there, it yields the row sums (into sums),
 * else sums holds them. Accumulators start at -128 * sum(a): the bias of packed b taken back out.
 * R * NB accumulators (at most 24) stay in the 32 vector registers. */
static inline __attribute__((always_inline)) void tile(
    const int R, const int NB, const int AQ, const int ACC, const int SPREAD, const struct core *g, int32_t *c,
    const int8_t *a, int rows, const HVX_Vector *b, int32_t *sums, int flags, HVX_Vector spread)
{
    /* locals first: the stores through c may alias *g */
    const int aq = AQ ? AQ : g->aq, k4 = g->k4, ldc = g->ldc, lda = g->lda, spill = g->spill;
    const int al = AQ == WORDS ? 0 : g->aligned;   /* WORDS (conv_padded's rows) keep their stores */
    const int32_t *off = g->off;
    const int last = flags & TILE_LAST, tail = flags & TILE_TAIL;
    const int ones = last ? g->ones : -1, cols_last = last ? g->cols_last : 32;
    /* one named array per row, every index a constant: the accumulators stay in registers */
#define ROWS(X) do { X(0); X(1); X(2); X(3); if (R >= 8) { X(4); X(5); X(6); X(7); } \
                            if (R == 12) { X(8); X(9); X(10); X(11); } } while (0)
#define BLOCKS for (int j = 0; j < NB; j++)
#define DECLARE(r) \
    const int32_t *a##r = (const int32_t *)(AQ == WORDS ? a + 4 * r : a + (r < rows ? r : rows - 1) * lda); \
    HVX_Vector acc##r[4]
    DECLARE(0); DECLARE(1); DECLARE(2); DECLARE(3); DECLARE(4); DECLARE(5); DECLARE(6); DECLARE(7);
    DECLARE(8); DECLARE(9); DECLARE(10); DECLARE(11);
#undef DECLARE
#define START(r) do { \
        HVX_Vector start = ones >= 0 ? Q6_V_vzero() : Q6_V_vsplat_R(-128 * sums[r]); \
        BLOCKS acc##r[j] = start; \
    } while (0)
    ROWS(START);
#undef START
    /* one block over contiguous 8-byte-aligned rows: two words of a row per doubleword
     * load, 4 memd + 2 vmem per 8 vrmpy (was 8 memw + 2 vmem: the loop was load-bound,
     * 12 packets per 16 vrmpy, now 10); the odd words into a second accumulator per row,
     * so no row waits on its own vrmpy chain; k4 odd: the last word in the loop below */
    int q0 = 0;
    if (AQ == 1 && NB == 1 && R == 4 && ((uintptr_t)a | (uint32_t)lda) % 8 == 0 && k4 > 1) {
        HVX_Vector odd0 = Q6_V_vzero(), odd1 = odd0, odd2 = odd0, odd3 = odd0;
        if (k4 >= 8) {   /* deep rows: 4 words in 8 packets (one_block_words), clang-16 took 10 */
            one_block_words(a0, a1, a2, a3, b, k4 / 4, &acc0[0], &acc1[0], &acc2[0], &acc3[0], &odd0, &odd1, &odd2,
                            &odd3);
            q0 = k4 / 4 * 4;
        }
        for (; q0 + 1 < k4; q0 += 2) {
            HVX_Vector v0 = b[q0], v1 = b[q0 + 1];
#define DMAC(r) do { \
                int64_t d = *(const int64_t *)(a##r + q0); \
                acc##r[0] = Q6_Vw_vrmpyacc_VwVubRb(acc##r[0], v0, (int32_t)d); \
                odd##r = Q6_Vw_vrmpyacc_VwVubRb(odd##r, v1, (int32_t)(d >> 32)); \
            } while (0)
            DMAC(0); DMAC(1); DMAC(2); DMAC(3);
#undef DMAC
        }
        acc0[0] = Q6_Vw_vadd_VwVw(acc0[0], odd0); acc1[0] = Q6_Vw_vadd_VwVw(acc1[0], odd1);
        acc2[0] = Q6_Vw_vadd_VwVw(acc2[0], odd2); acc3[0] = Q6_Vw_vadd_VwVw(acc3[0], odd3);
    }
    for (int q = q0; q < k4; q++) {
#define WORD(r) int32_t w##r = AQ == WORDS ? *(const int32_t *)((const int8_t *)a##r + off[q]) : a##r[q * aq]
        /* rows as the lanes of vectors (aq 32: the weight gradients' err^T): rows 2i and 2i + 1
         * of word q are one doubleword, one load for two (a 4-row, 1-block tile had 5 loads
         * for 4 vrmpy); rows past `rows` read their lanes of the same vector, never stored */
#define PAIR(r, s) int32_t w##r, w##s; do { \
            int64_t d = ((const int64_t *)a)[q * 16 + r / 2]; \
            w##r = (int32_t)d; w##s = (int32_t)(d >> 32); \
        } while (0)
        if (AQ == 32) {
            PAIR(0, 1); PAIR(2, 3); PAIR(4, 5); PAIR(6, 7); PAIR(8, 9); PAIR(10, 11);
            BLOCKS {
                HVX_Vector v = b[j * k4 + q];
#define MAC(r) acc##r[j] = Q6_Vw_vrmpyacc_VwVubRb(acc##r[j], v, w##r)
                ROWS(MAC);
#undef MAC
            }
            continue;
        }
#undef PAIR
        WORD(0); WORD(1); WORD(2); WORD(3); WORD(4); WORD(5); WORD(6); WORD(7);
        WORD(8); WORD(9); WORD(10); WORD(11);
#undef WORD
        BLOCKS {
            HVX_Vector v = b[j * k4 + q];
#define MAC(r) acc##r[j] = Q6_Vw_vrmpyacc_VwVubRb(acc##r[j], v, w##r)
            ROWS(MAC);
#undef MAC
        }
    }
    if (SPREAD) {
        /* the product's only block: the row sums (lane `ones`) copied to every lane by one
         * vdelta a row (strip_spread's control), none through a scalar register (vextract
         * issues one a packet: ~12 packets for 4 rows), none stored (no other block reads them) */
#define FIX(r) do { \
            HVX_Vector fix = Q6_Vw_vasl_VwR(Q6_V_vdelta_VV(acc##r[0], spread), 7); \
            acc##r[0] = Q6_Vw_vsub_VwVw(acc##r[0], fix); \
        } while (0)
        ROWS(FIX);
#undef FIX
    } else if (ones >= 0) {   /* lane `ones` of the last block summed a against 1s: the row sums */
#define FIX(r) do { \
            sums[r] = Q6_R_vextract_VR(acc##r[NB - 1], 4 * ones); \
            HVX_Vector fix = Q6_V_vsplat_R(-128 * sums[r]); \
            BLOCKS acc##r[j] = Q6_Vw_vadd_VwVw(acc##r[j], fix); \
        } while (0)
        ROWS(FIX);
#undef FIX
    }
    if (R == 4 && NB == 1 && ldc == cols_last && cols_last <= 16) {
        /* narrow outputs (n <= 16, rows contiguous): two rows per vector, one store */
        uint32_t shift = 4 * (uint32_t)cols_last;
        HVX_VectorPred upper = Q6_Q_vsetq_R(shift);   /* lanes of the first row */
        HVX_Vector v01 = Q6_V_vmux_QVV(upper, acc0[0], Q6_V_vlalign_VVR(acc1[0], acc1[0], shift));
        HVX_Vector v23 = Q6_V_vmux_QVV(upper, acc2[0], Q6_V_vlalign_VVR(acc3[0], acc3[0], shift));
        store_exact(ACC, c, v01, (rows < 2 ? rows : 2) * cols_last);
        if (rows > 2) store_exact(ACC, c + 2 * ldc, v23, (rows - 2) * cols_last);
        return;
    }
    if (SPREAD && ldc == 24 && cols_last == 24 && rows == 4 && (uintptr_t)c % HVX_BYTES == 0) {
        /* rows of 24 words back to back (MobileNetV2's 24-channel dx; the spread strips
         * only, so the other 4 x 1 tiles pay no test): 4 rows are 3 whole
         * aligned vectors, each row rotated into place (vlalign) and merged (vmux), not 4
         * spilled stores (an unaligned load, a mux and an unaligned store each) */
        HVX_Vector r1 = Q6_V_vlalign_VVR(acc1[0], acc1[0], 96), r2 = Q6_V_vlalign_VVR(acc2[0], acc2[0], 64);
        HVX_Vector r3 = Q6_V_vlalign_VVR(acc3[0], acc3[0], 32);
        HVX_Vector *cv = (HVX_Vector *)c;
        HVX_Vector v0 = Q6_V_vmux_QVV(Q6_Q_vsetq_R(96), acc0[0], r1), v1 = Q6_V_vmux_QVV(Q6_Q_vsetq_R(64), r1, r2);
        HVX_Vector v2 = Q6_V_vmux_QVV(Q6_Q_vsetq_R(32), r2, r3);
        cv[0] = ACC ? Q6_Vw_vadd_VwVw(cv[0], v0) : v0;
        cv[1] = ACC ? Q6_Vw_vadd_VwVw(cv[1], v1) : v1;
        cv[2] = ACC ? Q6_Vw_vadd_VwVw(cv[2], v2) : v2;
        return;
    }
    /* a row's blocks in address order, so what a spilled last block writes past the
     * row is the next row's first block, stored after it */
    HVX_VectorPred keep = Q6_Q_vsetq_R(4 * (uint32_t)cols_last);
    int exact_row = !spill ? 0 : tail ? rows - 1 : R;   /* rows from here store the last block exactly */
#define STORE(r) do { \
        if (r > 0 && r >= rows) return; \
        int32_t *cr = c + r * ldc, *cl = cr + (NB - 1) * 32; \
        for (int j = 0; j < NB - 1; j++) store_full(ACC, cr + j * 32, acc##r[j], al); \
        if (cols_last == 32) store_full(ACC, cl, acc##r[NB - 1], al); \
        else if (r < exact_row) store_spilled(ACC, cl, acc##r[NB - 1], keep); \
        else store_exact(ACC, cl, acc##r[NB - 1], cols_last); \
    } while (0)
    ROWS(STORE);
#undef STORE
#undef BLOCKS
#undef ROWS
}

/* A column strip: rows [0, m) x NB blocks from b in tiles of R rows, sums[] one per row
 * (written by the strip holding the 1s lane, read by the others). `flags` as tile's;
 * TILE_TAIL goes to the strip's last tile only. */
static inline __attribute__((always_inline)) void strip_rows(
    const int R, const int NB, const int AQ, const int ACC, const int SPREAD, const struct core *g, int32_t *c,
    const int8_t *a, int m, const HVX_Vector *b, int32_t *sums, int flags)
{
    const int ldc = g->ldc, lda = g->lda;
    /* SPREAD: vdelta's control copying lane `ones` to every lane, once a strip (stage o
     * takes byte k ^ o where bit o of ctrl[k] is set: bits 2-6 of k ^ 4 ones) */
    HVX_Vector spread = SPREAD ? Q6_V_vand_VV(Q6_V_vxor_VV(*(const HVX_Vector *)byte_index,
                                                           Q6_V_vsplat_R(4 * g->ones * 0x01010101)),
                                              Q6_V_vsplat_R(0x7C7C7C7C))
                               : Q6_V_vzero();
    /* whole tiles before the last: `rows` a constant, so their clamps and tests fold away */
    int row = 0, whole = (m - 1) / R * R;
    for (; row < whole; row += R)
        tile(R, NB, AQ, ACC, SPREAD, g, c + row * ldc, a + row * lda, R, b, sums + row, flags & ~TILE_TAIL, spread);
    tile(R, NB, AQ, ACC, SPREAD, g, c + row * ldc, a + row * lda, m - row, b, sums + row, flags, spread);
}

/* The strip once per group of rows (g->groups): the WORDS layout's; the other layouts
 * have one group and compile without the loop. */
static inline __attribute__((always_inline)) void strip(
    const int R, const int NB, const int AQ, const int ACC, const struct core *g, int32_t *c, const int8_t *a,
    int m, const HVX_Vector *b, int32_t *sums, int flags)
{
    if (AQ != WORDS) {
        strip_rows(R, NB, AQ, ACC, 0, g, c, a, m, b, sums, flags);
        return;
    }
    const int groups = g->rg->groups, a_group = g->rg->a_bytes, c_group = g->rg->c_words, s_group = g->rg->sums;
    for (int grp = 0; grp < groups; grp++, c += c_group, a += a_group, sums += s_group)
        strip_rows(R, NB, AQ, ACC, 0, g, c, a, m, b, sums, flags);
}

/* One compiled strip per tile shape (R rows x NB blocks), row layout (aq = 1: contiguous
 * rows; 32: rows as the lanes of vectors, conv.c's weight gradient; 0: any; WORDS) and store
 * (ACC: add into c), each its own function so its registers are its own. */
typedef void (*strip_fn)(const struct core *, int32_t *, const int8_t *, int, const HVX_Vector *, int32_t *, int);
#define STRIP(R, NB, AQ, L, ACC) \
    static __attribute__((noinline)) void strip_##R##_##NB##_##L##_##ACC( \
        const struct core *g, int32_t *c, const int8_t *a, int m, const HVX_Vector *b, int32_t *sums, int flags) \
    { strip(R, NB, AQ, ACC, g, c, a, m, b, sums, flags); }
#define STRIPS(AQ, L, ACC) STRIP(4, 1, AQ, L, ACC) STRIP(4, 2, AQ, L, ACC) STRIP(4, 3, AQ, L, ACC) \
    STRIP(4, 4, AQ, L, ACC) STRIP(8, 2, AQ, L, ACC) STRIP(8, 3, AQ, L, ACC)
STRIPS(1, 1, 0) STRIPS(32, 32, 0) STRIPS(0, 0, 0) STRIPS(WORDS, words, 0)
STRIPS(1, 1, 1) STRIPS(32, 32, 1) STRIPS(0, 0, 1) STRIPS(WORDS, words, 1)
/* WORDS rows share one base pointer: 12 rows x 2 blocks (24 accumulators) fit */
STRIP(12, 2, WORDS, words, 0) STRIP(12, 2, WORDS, words, 1)
static const strip_fn strips12[2] = {strip_12_2_words_0, strip_12_2_words_1};
/* Contiguous rows, one block holding the lane of 1s, the product's only one (n < 32): the
 * sums fix by vdelta (tile SPREAD), in strips of their own so the other strips keep their
 * registers */
#define STRIP_SPREAD(ACC) \
    static __attribute__((noinline)) void strip_spread_##ACC( \
        const struct core *g, int32_t *c, const int8_t *a, int m, const HVX_Vector *b, int32_t *sums, int flags) \
    { strip_rows(4, 1, 1, ACC, 1, g, c, a, m, b, sums, flags); }
STRIP_SPREAD(0) STRIP_SPREAD(1)
#undef STRIP_SPREAD
static const strip_fn strips_spread[2][2][4] = {{{strip_spread_0}}, {{strip_spread_1}}};   /* as strips[acc][layout] */
#undef STRIPS
#undef STRIP
/* [accumulate][layout][rows 4 or 8][blocks - 1]; 8 rows x 4 blocks would need 32
 * accumulators: that shape runs as 4 rows x 4 blocks */
#define SHAPES(AQ, ACC) \
    {{strip_4_1_##AQ##_##ACC, strip_4_2_##AQ##_##ACC, strip_4_3_##AQ##_##ACC, strip_4_4_##AQ##_##ACC}, \
     {0, strip_8_2_##AQ##_##ACC, strip_8_3_##AQ##_##ACC, 0}}
static const strip_fn strips[2][4][2][4] = {
    {SHAPES(1, 0), SHAPES(32, 0), SHAPES(0, 0), SHAPES(words, 0)},
    {SHAPES(1, 1), SHAPES(32, 1), SHAPES(0, 1), SHAPES(words, 1)},
};
#undef SHAPES

/* Whole 4-row tiles of NB <= 3 blocks over contiguous rows of K4 words, pipelined by
 * hand: a tile's stores wait for its last vrmpy and HVX stores one vector a packet, so
 * tile i's are issued among tile i + 1's vrmpy (restrict: the stores cannot reach a or b).
 * Unpipelined, an 8-row x 3-block tile of K4 = 4 spent 24 of its ~100 packets storing.
 * Two tiles' accumulators (2 x 4 x NB) stay in registers. Whole blocks take the rows'
 * sums; ONES (one block, the product's last: `cols` columns, then the lane of 1s) yields
 * them from that lane, and stores the block spilled (ldc == n: the lanes past cols are the
 * next row's, written back as read). The classic software pipelining of a GEMM
 * micro-kernel's write-back, as in the hand-scheduled loops of Hexagon NN / nnlib; the
 * code is ours. */
#define PIPE_ROWS 4
static inline __attribute__((always_inline)) void piped_tiles(const int NB, const int ACC, const int K4, const int AL,
                                                              const int ONES, int32_t *restrict c, int ldc,
                                                              const int8_t *restrict a, int tiles,
                                                              const HVX_Vector *restrict b, int32_t *restrict sums,
                                                              int cols)
{
    HVX_Vector cur[PIPE_ROWS][3], prev[PIPE_ROWS][3];
    HVX_VectorPred keep = Q6_Q_vsetq_R(4 * (uint32_t)cols);
#define COMPUTE(t) do { \
        const int32_t *at = (const int32_t *)(a + (t) * PIPE_ROWS * 4 * K4); \
        _Pragma("clang loop unroll(full)") for (int r = 0; r < PIPE_ROWS; r++) { \
            HVX_Vector start = ONES ? Q6_V_vzero() : Q6_V_vsplat_R(-128 * sums[(t) * PIPE_ROWS + r]); \
            _Pragma("clang loop unroll(full)") for (int j = 0; j < NB; j++) cur[r][j] = start; \
        } \
        _Pragma("clang loop unroll(full)") for (int q = 0; q < K4; q++) \
            _Pragma("clang loop unroll(full)") for (int j = 0; j < NB; j++) { \
                HVX_Vector v = b[j * K4 + q]; \
                _Pragma("clang loop unroll(full)") for (int r = 0; r < PIPE_ROWS; r++) \
                    cur[r][j] = Q6_Vw_vrmpyacc_VwVubRb(cur[r][j], v, at[r * K4 + q]); \
            } \
        if (ONES) \
            _Pragma("clang loop unroll(full)") for (int r = 0; r < PIPE_ROWS; r++) { \
                int32_t sum = Q6_R_vextract_VR(cur[r][0], 4 * cols); \
                sums[(t) * PIPE_ROWS + r] = sum; \
                cur[r][0] = Q6_Vw_vadd_VwVw(cur[r][0], Q6_V_vsplat_R(-128 * sum)); \
            } \
    } while (0)
#define STORE_PREV(t) do { \
        _Pragma("clang loop unroll(full)") for (int r = 0; r < PIPE_ROWS; r++) \
            _Pragma("clang loop unroll(full)") for (int j = 0; j < NB; j++) { \
                int32_t *cp = c + ((t) * PIPE_ROWS + r) * ldc + 32 * j; \
                HVX_Vector v = prev[r][j]; \
                if (ONES) store_spilled(ACC, cp, v, keep); \
                else if (AL) *(HVX_Vector *)cp = ACC ? Q6_Vw_vadd_VwVw(v, *(HVX_Vector *)cp) : v; \
                else hvx_store_u(cp, ACC ? Q6_Vw_vadd_VwVw(v, hvx_load_u(cp)) : v); \
            } \
    } while (0)
#define KEEP() do { \
        _Pragma("clang loop unroll(full)") for (int r = 0; r < PIPE_ROWS; r++) \
            _Pragma("clang loop unroll(full)") for (int j = 0; j < NB; j++) prev[r][j] = cur[r][j]; \
    } while (0)
    COMPUTE(0);
    KEEP();
    for (int t = 1; t < tiles; t++) {
        COMPUTE(t);
        STORE_PREV(t - 1);
        KEEP();
    }
    STORE_PREV(tiles - 1);
#undef COMPUTE
#undef STORE_PREV
#undef KEEP
}

typedef void (*piped_fn)(int32_t *restrict, int, const int8_t *restrict, int, const HVX_Vector *restrict,
                         int32_t *restrict, int);
#define PIPED(NB, ACC, K4, AL, ONES, NAME) \
    static __attribute__((noinline)) void piped_##NAME##_##ACC##_##K4##_##AL( \
        int32_t *restrict c, int ldc, const int8_t *restrict a, int tiles, const HVX_Vector *restrict b, \
        int32_t *restrict sums, int cols) \
    { piped_tiles(NB, ACC, K4, AL, ONES, c, ldc, a, tiles, b, sums, cols); }
#define PIPED_NB(ACC, K4, AL) PIPED(1, ACC, K4, AL, 0, 1) PIPED(2, ACC, K4, AL, 0, 2) PIPED(3, ACC, K4, AL, 0, 3) \
    PIPED(1, ACC, K4, AL, 1, ones)
#define PIPED_K(ACC, AL) PIPED_NB(ACC, 4, AL) PIPED_NB(ACC, 6, AL) PIPED_NB(ACC, 8, AL)
PIPED_K(0, 0) PIPED_K(0, 1) PIPED_K(1, 0) PIPED_K(1, 1)
#define PIPED_ROW(ACC, K4, AL) \
    {piped_ones_##ACC##_##K4##_##AL, piped_1_##ACC##_##K4##_##AL, piped_2_##ACC##_##K4##_##AL, \
     piped_3_##ACC##_##K4##_##AL}
#define PIPED_KS(ACC, AL) {PIPED_ROW(ACC, 4, AL), PIPED_ROW(ACC, 6, AL), PIPED_ROW(ACC, 8, AL)}
/* [accumulate][aligned][K4 4, 6, 8][0: the block with the lane of 1s, else whole blocks] */
static const piped_fn pipeds[2][2][3][4] = {{PIPED_KS(0, 0), PIPED_KS(0, 1)}, {PIPED_KS(1, 0), PIPED_KS(1, 1)}};
#undef PIPED_KS
#undef PIPED_ROW
#undef PIPED_K
#undef PIPED_NB
#undef PIPED

/* Rows [0, m) of one column strip of NB blocks: 8-row tiles where NB is 2 or 3, the
 * last 1 to 4 rows in 4-row tiles (an 8-row tile there would multiply repeated rows);
 * one block runs 4-row tiles (8 rows: 9 loads per 8 vrmpy, and the compiler spills). */
static void run_strip(const strip_fn (*fn)[4], const struct core *g, int32_t *c, const int8_t *a, int m,
                      const HVX_Vector *b, int32_t *sums, int nb, int flags)
{
    if (g->twelve && nb == 2 && m >= 12) {   /* WORDS: 12-row tiles, then the rest */
        int big = m / 12 * 12;
        g->twelve(g, c, a, big, b, sums, big == m ? flags : flags & ~TILE_TAIL);
        if (big == m) return;
        c += big * g->ldc; a += big * g->lda; sums += big; m -= big;
    }
    int big = nb == 2 || nb == 3 ? m - (m % 8 <= 4 ? m % 8 : 0) : 0;   /* rows in 8-row tiles */
    if (big) fn[1][nb - 1](g, c, a, big, b, sums, big == m ? flags : flags & ~TILE_TAIL);
    if (big < m) fn[0][nb - 1](g, c + big * g->ldc, a + big * g->lda, m - big, b, sums + big, flags);
}

static void core_depth(int32_t *c, int ldc, const int8_t *a, const int8_t *bp, int m, int n, int k, int accumulate);

void dspt_gemm_core(int32_t *c, int ldc, const int8_t *a, int lda, const int8_t *bp,
                    int m, int n, int k, int accumulate)
{
    /* contiguous rows of 16, 24 or 32 bytes (pointwise products from 16 to 32 channels):
     * pipelined tiles with the depth compiled in (piped_tiles), in a core of their own */
    if (lda == k && (k == 16 || k == 24 || k == 32)) {
        core_depth(c, ldc, a, bp, m, n, k, accumulate);
        return;
    }
    dspt_gemm_core_strided(c, ldc, a, lda, 1, bp, m, n, k, accumulate);
}

#define ROW_BLOCK 256   /* rows whose sums one pass keeps (on the stack) */

/* The core for any layout: `layout` indexes strips (0: aq 1, 1: aq 32, 2: other aq,
 * 3: WORDS with g->off), or with DEPTH (contiguous rows of K4 = 4, 6, 8 words) pipeds
 * (0, 1, 2); `given`: the rows' byte sums when the caller has them (else computed here
 * when no lane of 1s yields them). Inlined in each entry, so the tests of `given` and
 * DEPTH fold away in the ones that have none. */
static inline __attribute__((always_inline)) void core(const int DEPTH, struct core *g, int layout, int32_t *c,
                                                       const int8_t *a, const int8_t *bp, int m, int n,
                                                       const int32_t *given, int accumulate)
{
    int k4 = g->k4, ldc = g->ldc, lda = g->lda, nblocks = (n + 31) / 32;
    /* column strips of 4 blocks, the last of 1 to 4 (of up to 3 when that is all: 8-row tiles) */
    int nb_last = nblocks <= 3 ? 0 : (nblocks - 1) / 4 * 4, left = nblocks - nb_last;
    /* packed b has a lane of 1s after the last column when n % 32 != 0 (dspt_pack_b and
     * the conv packers): the strip holding it yields the row sums, and runs first */
    g->cols_last = n - (nblocks - 1) * 32;
    g->ones = n % 32 ? n % 32 : -1;
    g->spill = ldc == n;
    g->aligned = (uintptr_t)c % HVX_BYTES == 0 && ldc % 32 == 0 && (!g->rg || g->rg->c_words % 32 == 0);
    if (given) {   /* the sums, not the 1s lane (its column is never stored); no spills across groups */
        g->ones = -1;
        g->spill = g->spill && g->rg->groups == 1;
    }
    /* the depth-compiled layouts' rows left over and lane of 1s: the contiguous rows' strips */
    const strip_fn (*fn)[4] = strips[accumulate != 0][DEPTH ? 0 : layout];
    const HVX_Vector *bv = (const HVX_Vector *)bp;
    HVX_Vector sum_store[ROW_BLOCK / 32 + 1];   /* + slack: tiles and row_sums write up to 8 past m */
    for (int r0 = 0; r0 < m; r0 += ROW_BLOCK) {
        int mm = m - r0 < ROW_BLOCK ? m - r0 : ROW_BLOCK, tail = r0 + mm == m ? TILE_TAIL : 0;
        int32_t *cr = c + r0 * ldc, *sums = (int32_t *)sum_store;
        const int8_t *ar = a + r0 * lda;
        if (DEPTH) {   /* K4 words a row: pipelined tiles (piped_tiles) */
            const piped_fn *pf = pipeds[accumulate != 0][g->aligned][layout];
            int full = nblocks, whole = mm / PIPE_ROWS;
            if (g->ones < 0) {
                int r = 16 % k4 ? 0 : mm / 32 * 32;   /* whole runs of 32 rows of 16 or 32 bytes: one call */
                if (r) row_sums32(sums, ar, k4, r / 32);
                for (; r < mm; r += 32) row_sums(sums + r, ar + r * lda, lda, 1, mm - r < 32 ? mm - r : 32, k4);
            }
            if (g->ones >= 0) {   /* the last block alone first: it yields the sums */
                /* spilled stores need ldc == n, and not past the call's last row */
                int w1 = !g->spill ? 0 : tail ? (mm - 1) / PIPE_ROWS : whole;
                full = nblocks - 1;
                if (w1) pf[0](cr + full * 32, ldc, ar, w1, bv + full * k4, sums, g->cols_last);
                if (w1 * PIPE_ROWS < mm)
                    fn[0][0](g, cr + w1 * PIPE_ROWS * ldc + full * 32, ar + w1 * PIPE_ROWS * lda,
                             mm - w1 * PIPE_ROWS, bv + full * k4, sums + w1 * PIPE_ROWS, TILE_LAST | tail);
            }
            for (int nb = 0; nb < full; nb += 3) {
                int w = full - nb < 3 ? full - nb : 3, flags = nb + w == nblocks ? TILE_LAST | tail : 0;
                if (whole) pf[w](cr + nb * 32, ldc, ar, whole, bv + nb * k4, sums, 32);
                if (whole * PIPE_ROWS < mm)
                    fn[0][w - 1](g, cr + whole * PIPE_ROWS * ldc + nb * 32, ar + whole * PIPE_ROWS * lda,
                                 mm - whole * PIPE_ROWS, bv + nb * k4, sums + whole * PIPE_ROWS, flags);
            }
            continue;
        }
        if (g->ones >= 0)
            run_strip(nblocks == 1 && layout == 0 ? strips_spread[accumulate != 0] : fn, g, cr + nb_last * 32, ar, mm,
                      bv + nb_last * k4, sums, left, TILE_LAST | tail);
        else if (given)
            sums = (int32_t *)given + r0;
        else
            for (int r = 0; r < mm; r += 32) row_sums(sums + r, ar + r * lda, lda, g->aq, mm - r < 32 ? mm - r : 32, k4);
        for (int nb = 0; nb < nb_last; nb += 4) run_strip(fn, g, cr + nb * 32, ar, mm, bv + nb * k4, sums, 4, 0);
        if (g->ones < 0) run_strip(fn, g, cr + nb_last * 32, ar, mm, bv + nb_last * k4, sums, left, TILE_LAST | tail);
    }
}

void dspt_gemm_core_strided(int32_t *c, int ldc, const int8_t *a, int lda, int aq, const int8_t *bp,
                            int m, int n, int k, int accumulate)
{
    struct core g = {.ldc = ldc, .lda = lda, .aq = aq, .k4 = (k + 3) / 4};
    core(0, &g, aq == 1 ? 0 : aq == 32 ? 1 : 2, c, a, bp, m, n, 0, accumulate);
}

void dspt_gemm_core_words(int32_t *c, int ldc, const int8_t *a, const int32_t *off, int k4, const int32_t *sums,
                          const int8_t *bp, int m, int n, int accumulate, const struct dspt_row_groups *rg)
{
    struct core g = {.ldc = ldc, .lda = 4, .aq = 1, .k4 = k4, .off = off, .twelve = strips12[accumulate != 0],
                     .rg = rg};
    core(0, &g, 3, c, a, bp, m, n, sums, accumulate);
}

static __attribute__((noinline)) void core_depth(int32_t *c, int ldc, const int8_t *a, const int8_t *bp, int m,
                                                  int n, int k, int accumulate)
{
    struct core g = {.ldc = ldc, .lda = k, .aq = 1, .k4 = k / 4};
    core(1, &g, (k / 4 - 4) / 2, c, a, bp, m, n, 0, accumulate);
}

/* Rows of `a` must be word-aligned for the scalar loads: copied to a stride of
 * round_up(k, 4) when they are not, whole unaligned vectors in address order (what a
 * row's last vector writes past it, the next row overwrites; the buffer has a vector of
 * slack, the arena too); the bytes between k and the stride hold whatever follows. */
static const int8_t *aligned_rows(struct dspt_ctx *ctx, const int8_t *a, int m, int k, int *lda)
{
    if ((k % 4) == 0 && ((uintptr_t)a % 4) == 0) { *lda = k; return a; }
    int stride = (k + 3) & ~3;
    int8_t *buf = dspt_scratch(ctx, (uint32_t)m * stride + HVX_BYTES);
    if (!buf) return 0;
    for (int r = 0; r < m; r++)
        for (int i = 0; i < k; i += HVX_BYTES) hvx_store_u(buf + r * stride + i, hvx_load_u(a + r * k + i));
    *lda = stride;
    return buf;
}

/* One HVX thread's band of rows of c (threads.h). */
struct gemm_job {
    int32_t *c;
    const int8_t *a;
    int lda;
    const int8_t *bp;
    int m, n, k, acc;
};

static int gemm_share(struct dspt_ctx *tc, int t, void *arg)
{
    const struct gemm_job *j = arg;
    int lo, hi;
    dspt_share(tc, j->m, 4, t, &lo, &hi);
    if (lo < hi) dspt_gemm_core(j->c + lo * j->n, j->n, j->a + lo * j->lda, j->lda, j->bp, hi - lo, j->n, j->k, j->acc);
    return DSPT_OK;
}

/* Op: in0 a[M,K] (shape_a = M,K,1,1), in1 b[N,K] -> out0 c[M,N] int32. */
int dspt_op_gemm(struct dspt_ctx *ctx, struct dspt_op_desc *d)
{
    int m = d->shape_a[0], k = d->shape_a[1], n = d->shape_b[0];
    if (d->dtype != DSPT_I8) return DSPT_NO_SUPPORT;
    if (m <= 0 || n <= 0 || k <= 0 || d->shape_b[1] != k) return DSPT_BAD_PARAMS;
    if ((int64_t)k * 127 * 127 >= ((int64_t)1 << 31)) return DSPT_NO_SUPPORT;  /* int64 acc */
    const int8_t *a = dspt_at(ctx, d->in[0], (uint32_t)m * k);
    const int8_t *b = dspt_at(ctx, d->in[1], (uint32_t)n * k);
    int32_t *c = dspt_at(ctx, d->out[0], (uint32_t)m * n * 4);
    if (!a || !b || !c) return DSPT_BAD_PARAMS;
    int8_t *bp = dspt_scratch(ctx, dspt_packed_b_bytes(n, k));
    int lda;
    const int8_t *ar = aligned_rows(ctx, a, m, k, &lda);
    if (!bp || !ar) return DSPT_NO_SUPPORT;  /* too big for the scratch: the CPU takes it */
    dspt_pack_b(bp, b, n, k, k);
    struct gemm_job job = {c, ar, lda, bp, m, n, k, (d->flags & DSPT_F_ACCUMULATE) != 0};
    return dspt_run_shares(ctx, gemm_share, &job);
}
