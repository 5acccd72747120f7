/* dwconv_wgrad_rows.c: the depthwise weight gradient's 3 x 3 rows (stride 1 and 2) on the
 * image quads of dwconv_wgrad.c, written in packets.
 *
 * Each vrmpy of an x vector by an err vector is 4 images x 32 channels of real products, so
 * the row loops are bound by packing, not by wasted lanes: clang-16 packs a plain vrmpy two
 * to a packet but keeps the products' vadds, the loads and the register moves of the
 * columns kept for the next output in packets of their own (9-10 packets for an output's 9
 * vrmpy at stride 1, 12-13 at stride 2). Here the loops are software-pipelined by hand
 * (modulo scheduling: B. R. Rau, "Iterative modulo scheduling", MICRO-27, 1994): the packets
 * are a greedy list schedule under HVX's limits (4 slots, 2 vrmpy, 1 vector load; vmemu takes
 * 2 slots), repeated until the products left for the next output's packets are the same
 * each time, and checked by a symbolic run of every product through the loops against the
 * convolution's sums (scripts/dw_wgrad_rows.py prints them and checks this file holds them;
 * tests/null/test_dw_wgrad_rows.py). Each output's products, the vadds of the products before and the next
 * output's loads share packets, and the columns live in register sets that alternate roles
 * from one output to the next instead of being moved. The assembler checks each packet's
 * slots. The 9 sums stay across all groups in registers the compiler picks.
 */
#include "hvx-utils.h"
#include "kernels.h"
#include "dwconv.h"
#include "dwconv_wgrad.h"

int dspt_dw_wgrad_rows_fit(const struct dw_shape *s)
{
    return s->kh == 3 && s->kw == 3 && ((s->stride == 1 && s->ow % 4 == 0) || (s->stride == 2 && s->ow % 2 == 0));
}

/* Stride 1, OW % 4 == 0 (dwconv_wgrad.c's wg_block3 in packets): a row of outputs in
 * halves of 2 outputs, each 18 vrmpy (two a packet, plain: two vrmpyacc never share one),
 * their 18 vadds and the next half's 8 loads (6 x columns, 2 err vectors), modulo-scheduled so every slot works: 11
 * packets (aligned vmem; 13 with vmemu, which takes two slots) for 2 outputs, where clang-16
 * made 9-10 packets of one. Registers: the 3 kernel rows' columns in two sets of 6 (v0-v5,
 * v6-v11; a half reads the columns o .. o + 3 from both and reloads the set holding o, o + 1
 * with o + 4, o + 5, so the halves alternate the sets), err v12-v13, products v14-v22 (a
 * product's vadd may come one half later: v22 is zeroed first), the 9 sums in registers the
 * compiler picks. The rows of a group run on as one flat array (the quads' rows are OW + 2
 * pixels): the last half of a row loads the next row's columns 0, 1 and err pixels, so a new
 * row moves that set over and loads columns 2, 3 (6 packets). The loads run up to a row and
 * 4 pixels past the group (the buffers' slack, WG_SLACK). */
#define WG3S1_OPERANDS                                                                                            \
    : [x0] "+r"(x0), [x1] "+r"(x1), [x2] "+r"(x2), [e] "+r"(e), [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2),      \
      [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5), [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8)                    \
    : [pitch] "r"(pitch), [rows] "r"(rows), [nb] "r"(nb)                                                         \
    : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", \
      "v17", "v18", "v19", "v20", "v21", "v22", "m0", "lc0", "sa0", "lc1", "sa1", "usr", "memory"

static void wg_rows_s1(int AL, int32_t *part, const struct dw_shape *s, const struct quad *xq, const struct quad *eq,
                       int ng, int cb, int add)
{
    HVX_Vector a0 = Q6_V_vzero(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0;
    const int pitch = xq->pitch, xrow = xq->cols * pitch, rows = s->oh, nb = s->ow / 4;
    for (int gi = 0; gi < ng; gi++) {
        const int8_t *x0 = xq->buf + gi * xq->rows * xrow + cb * HVX_BYTES, *x1 = x0 + xrow, *x2 = x1 + xrow;
        const int8_t *e = eq->buf + gi * eq->rows * eq->cols * pitch + cb * HVX_BYTES;
        if (AL)
            __asm__ volatile(
                "{ m0 = %[pitch]; v22 = vxor(v22,v22) }\n"
                "{ v0 = vmem(%[x0]++m0) }\n"
                "{ v1 = vmem(%[x0]++m0) }\n"
                "{ v6 = vmem(%[x0]++m0) }\n"
                "{ v7 = vmem(%[x0]++m0) }\n"
                "{ v2 = vmem(%[x1]++m0) }\n"
                "{ v3 = vmem(%[x1]++m0) }\n"
                "{ v8 = vmem(%[x1]++m0) }\n"
                "{ v9 = vmem(%[x1]++m0) }\n"
                "{ v4 = vmem(%[x2]++m0) }\n"
                "{ v5 = vmem(%[x2]++m0) }\n"
                "{ v10 = vmem(%[x2]++m0) }\n"
                "{ v11 = vmem(%[x2]++m0) }\n"
                "{ v12 = vmem(%[e]++m0); loop1(2f, %[rows]) }\n"
                "{ v13 = vmem(%[e]++m0); loop0(2f, %[nb]) }\n"
                "2:\n"
                "{ v14.w = vrmpy(v0.b,v12.b); v15.w = vrmpy(v2.b,v12.b); v0 = vmem(%[x0]++m0); %[a8].w = vadd(%[a8].w,v22.w) }\n"
                "{ v16.w = vrmpy(v4.b,v12.b); v17.w = vrmpy(v1.b,v12.b); v2 = vmem(%[x1]++m0); %[a0].w = vadd(%[a0].w,v14.w) }\n"
                "{ v18.w = vrmpy(v3.b,v12.b); v19.w = vrmpy(v5.b,v12.b); v4 = vmem(%[x2]++m0); %[a3].w = vadd(%[a3].w,v15.w) }\n"
                "{ v20.w = vrmpy(v1.b,v13.b); v21.w = vrmpy(v3.b,v13.b); v1 = vmem(%[x0]++m0); %[a6].w = vadd(%[a6].w,v16.w) }\n"
                "{ v22.w = vrmpy(v5.b,v13.b); v14.w = vrmpy(v6.b,v12.b); v3 = vmem(%[x1]++m0); %[a1].w = vadd(%[a1].w,v17.w) }\n"
                "{ v15.w = vrmpy(v8.b,v12.b); v16.w = vrmpy(v10.b,v12.b); v5 = vmem(%[x2]++m0); %[a4].w = vadd(%[a4].w,v18.w) }\n"
                "{ v17.w = vrmpy(v6.b,v13.b); v18.w = vrmpy(v8.b,v13.b); v12 = vmem(%[e]++m0); %[a7].w = vadd(%[a7].w,v19.w) }\n"
                "{ v19.w = vrmpy(v10.b,v13.b); v20.w = vrmpy(v7.b,v13.b); %[a0].w = vadd(%[a0].w,v20.w); %[a3].w = vadd(%[a3].w,v21.w) }\n"
                "{ v21.w = vrmpy(v9.b,v13.b); v22.w = vrmpy(v11.b,v13.b); v13 = vmem(%[e]++m0); %[a6].w = vadd(%[a6].w,v22.w) }\n"
                "{ %[a2].w = vadd(%[a2].w,v14.w); %[a5].w = vadd(%[a5].w,v15.w); %[a8].w = vadd(%[a8].w,v16.w); %[a1].w = vadd(%[a1].w,v17.w) }\n"
                "{ %[a4].w = vadd(%[a4].w,v18.w); %[a7].w = vadd(%[a7].w,v19.w); %[a2].w = vadd(%[a2].w,v20.w); %[a5].w = vadd(%[a5].w,v21.w) }\n"
                "{ v14.w = vrmpy(v6.b,v12.b); v15.w = vrmpy(v8.b,v12.b); v6 = vmem(%[x0]++m0); %[a8].w = vadd(%[a8].w,v22.w) }\n"
                "{ v16.w = vrmpy(v10.b,v12.b); v17.w = vrmpy(v7.b,v12.b); v8 = vmem(%[x1]++m0); %[a0].w = vadd(%[a0].w,v14.w) }\n"
                "{ v18.w = vrmpy(v9.b,v12.b); v19.w = vrmpy(v11.b,v12.b); v10 = vmem(%[x2]++m0); %[a3].w = vadd(%[a3].w,v15.w) }\n"
                "{ v20.w = vrmpy(v7.b,v13.b); v21.w = vrmpy(v9.b,v13.b); v7 = vmem(%[x0]++m0); %[a6].w = vadd(%[a6].w,v16.w) }\n"
                "{ v22.w = vrmpy(v11.b,v13.b); v14.w = vrmpy(v0.b,v12.b); v9 = vmem(%[x1]++m0); %[a1].w = vadd(%[a1].w,v17.w) }\n"
                "{ v15.w = vrmpy(v2.b,v12.b); v16.w = vrmpy(v4.b,v12.b); v11 = vmem(%[x2]++m0); %[a4].w = vadd(%[a4].w,v18.w) }\n"
                "{ v17.w = vrmpy(v0.b,v13.b); v18.w = vrmpy(v2.b,v13.b); v12 = vmem(%[e]++m0); %[a7].w = vadd(%[a7].w,v19.w) }\n"
                "{ v19.w = vrmpy(v4.b,v13.b); v20.w = vrmpy(v1.b,v13.b); %[a0].w = vadd(%[a0].w,v20.w); %[a3].w = vadd(%[a3].w,v21.w) }\n"
                "{ v21.w = vrmpy(v3.b,v13.b); v22.w = vrmpy(v5.b,v13.b); v13 = vmem(%[e]++m0); %[a6].w = vadd(%[a6].w,v22.w) }\n"
                "{ %[a2].w = vadd(%[a2].w,v14.w); %[a5].w = vadd(%[a5].w,v15.w); %[a8].w = vadd(%[a8].w,v16.w); %[a1].w = vadd(%[a1].w,v17.w) }\n"
                "{ %[a4].w = vadd(%[a4].w,v18.w); %[a7].w = vadd(%[a7].w,v19.w); %[a2].w = vadd(%[a2].w,v20.w); %[a5].w = vadd(%[a5].w,v21.w) }:endloop0\n"
                "{ v0 = v6; v6 = vmem(%[x0]++m0); loop0(2b, %[nb]) }\n"
                "{ v1 = v7; v7 = vmem(%[x0]++m0) }\n"
                "{ v2 = v8; v8 = vmem(%[x1]++m0) }\n"
                "{ v3 = v9; v9 = vmem(%[x1]++m0) }\n"
                "{ v4 = v10; v10 = vmem(%[x2]++m0) }\n"
                "{ v5 = v11; v11 = vmem(%[x2]++m0) }:endloop1\n"
                "{ %[a8].w = vadd(%[a8].w,v22.w) }\n"
                WG3S1_OPERANDS);
        else
            __asm__ volatile(
                "{ m0 = %[pitch] }\n"
                "{ v0 = vmemu(%[x0]++m0) }\n"
                "{ v1 = vmemu(%[x0]++m0) }\n"
                "{ v6 = vmemu(%[x0]++m0) }\n"
                "{ v7 = vmemu(%[x0]++m0) }\n"
                "{ v2 = vmemu(%[x1]++m0) }\n"
                "{ v3 = vmemu(%[x1]++m0) }\n"
                "{ v8 = vmemu(%[x1]++m0) }\n"
                "{ v9 = vmemu(%[x1]++m0) }\n"
                "{ v4 = vmemu(%[x2]++m0) }\n"
                "{ v5 = vmemu(%[x2]++m0) }\n"
                "{ v10 = vmemu(%[x2]++m0) }\n"
                "{ v11 = vmemu(%[x2]++m0) }\n"
                "{ v12 = vmemu(%[e]++m0); loop1(2f, %[rows]) }\n"
                "{ v13 = vmemu(%[e]++m0); loop0(2f, %[nb]) }\n"
                "2:\n"
                "{ v14.w = vrmpy(v0.b,v12.b); v15.w = vrmpy(v2.b,v12.b); v0 = vmemu(%[x0]++m0) }\n"
                "{ v16.w = vrmpy(v4.b,v12.b); v17.w = vrmpy(v1.b,v12.b); v2 = vmemu(%[x1]++m0) }\n"
                "{ v18.w = vrmpy(v3.b,v12.b); v19.w = vrmpy(v5.b,v12.b); v4 = vmemu(%[x2]++m0) }\n"
                "{ v20.w = vrmpy(v1.b,v13.b); v21.w = vrmpy(v3.b,v13.b); v1 = vmemu(%[x0]++m0) }\n"
                "{ v22.w = vrmpy(v5.b,v13.b); v3 = vmemu(%[x1]++m0); %[a0].w = vadd(%[a0].w,v14.w) }\n"
                "{ v14.w = vrmpy(v6.b,v12.b); v5 = vmemu(%[x2]++m0); %[a3].w = vadd(%[a3].w,v15.w) }\n"
                "{ v15.w = vrmpy(v8.b,v12.b); %[a6].w = vadd(%[a6].w,v16.w); %[a1].w = vadd(%[a1].w,v17.w); %[a4].w = vadd(%[a4].w,v18.w) }\n"
                "{ v16.w = vrmpy(v10.b,v12.b); v17.w = vrmpy(v6.b,v13.b); v12 = vmemu(%[e]++m0) }\n"
                "{ v18.w = vrmpy(v8.b,v13.b); v19.w = vrmpy(v10.b,v13.b); %[a7].w = vadd(%[a7].w,v19.w); %[a0].w = vadd(%[a0].w,v20.w) }\n"
                "{ v20.w = vrmpy(v7.b,v13.b); v21.w = vrmpy(v9.b,v13.b); %[a3].w = vadd(%[a3].w,v21.w); %[a6].w = vadd(%[a6].w,v22.w) }\n"
                "{ v22.w = vrmpy(v11.b,v13.b); v13 = vmemu(%[e]++m0); %[a2].w = vadd(%[a2].w,v14.w) }\n"
                "{ %[a5].w = vadd(%[a5].w,v15.w); %[a8].w = vadd(%[a8].w,v16.w); %[a1].w = vadd(%[a1].w,v17.w); %[a4].w = vadd(%[a4].w,v18.w) }\n"
                "{ %[a7].w = vadd(%[a7].w,v19.w); %[a2].w = vadd(%[a2].w,v20.w); %[a5].w = vadd(%[a5].w,v21.w); %[a8].w = vadd(%[a8].w,v22.w) }\n"
                "{ v14.w = vrmpy(v6.b,v12.b); v15.w = vrmpy(v8.b,v12.b); v6 = vmemu(%[x0]++m0) }\n"
                "{ v16.w = vrmpy(v10.b,v12.b); v17.w = vrmpy(v7.b,v12.b); v8 = vmemu(%[x1]++m0) }\n"
                "{ v18.w = vrmpy(v9.b,v12.b); v19.w = vrmpy(v11.b,v12.b); v10 = vmemu(%[x2]++m0) }\n"
                "{ v20.w = vrmpy(v7.b,v13.b); v21.w = vrmpy(v9.b,v13.b); v7 = vmemu(%[x0]++m0) }\n"
                "{ v22.w = vrmpy(v11.b,v13.b); v9 = vmemu(%[x1]++m0); %[a0].w = vadd(%[a0].w,v14.w) }\n"
                "{ v14.w = vrmpy(v0.b,v12.b); v11 = vmemu(%[x2]++m0); %[a3].w = vadd(%[a3].w,v15.w) }\n"
                "{ v15.w = vrmpy(v2.b,v12.b); %[a6].w = vadd(%[a6].w,v16.w); %[a1].w = vadd(%[a1].w,v17.w); %[a4].w = vadd(%[a4].w,v18.w) }\n"
                "{ v16.w = vrmpy(v4.b,v12.b); v17.w = vrmpy(v0.b,v13.b); v12 = vmemu(%[e]++m0) }\n"
                "{ v18.w = vrmpy(v2.b,v13.b); v19.w = vrmpy(v4.b,v13.b); %[a7].w = vadd(%[a7].w,v19.w); %[a0].w = vadd(%[a0].w,v20.w) }\n"
                "{ v20.w = vrmpy(v1.b,v13.b); v21.w = vrmpy(v3.b,v13.b); %[a3].w = vadd(%[a3].w,v21.w); %[a6].w = vadd(%[a6].w,v22.w) }\n"
                "{ v22.w = vrmpy(v5.b,v13.b); v13 = vmemu(%[e]++m0); %[a2].w = vadd(%[a2].w,v14.w) }\n"
                "{ %[a5].w = vadd(%[a5].w,v15.w); %[a8].w = vadd(%[a8].w,v16.w); %[a1].w = vadd(%[a1].w,v17.w); %[a4].w = vadd(%[a4].w,v18.w) }\n"
                "{ %[a7].w = vadd(%[a7].w,v19.w); %[a2].w = vadd(%[a2].w,v20.w); %[a5].w = vadd(%[a5].w,v21.w); %[a8].w = vadd(%[a8].w,v22.w) }:endloop0\n"
                "{ v0 = v6; v6 = vmemu(%[x0]++m0); loop0(2b, %[nb]) }\n"
                "{ v1 = v7; v7 = vmemu(%[x0]++m0) }\n"
                "{ v2 = v8; v8 = vmemu(%[x1]++m0) }\n"
                "{ v3 = v9; v9 = vmemu(%[x1]++m0) }\n"
                "{ v4 = v10; v10 = vmemu(%[x2]++m0) }\n"
                "{ v5 = v11; v11 = vmemu(%[x2]++m0) }:endloop1\n"
                "{  }\n"
                WG3S1_OPERANDS);
    }
    const HVX_Vector acc[9] = {a0, a1, a2, a3, a4, a5, a6, a7, a8};
    wg_store(part, s, acc, 9, cb, add);
}

/* Stride 2, OW % 2 == 0 (dwconv_wgrad.c's wg_block3s2 in packets): an output's 9 vrmpy, their vadds and the next
 * output's 7 loads (its columns 2 ow + 3, 2 ow + 4 of the 3 kernel rows, its err vector) in
 * 7 packets (8 with vmemu), where clang-16 made 12-13. Column 2 ow + 2 stays for the next
 * output as its column 0, so the columns live in three sets of 3 registers, two of them
 * trading the roles "column 0" and "column 2" each output (v0-v2, v3-v5; column 1 in
 * v6-v8); the err vectors alternate v9, v19; products v10-v18. Err runs on across the rows;
 * a new row of outputs moves the x pointers two rows down and loads its first 3 columns (10
 * packets). Scheduled and checked as wg_rows_s1. */
#define WG3S2_OPERANDS                                                                                            \
    : [x0] "+r"(x0), [x1] "+r"(x1), [x2] "+r"(x2), [e] "+r"(e), [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2),      \
      [a3] "+v"(a3), [a4] "+v"(a4), [a5] "+v"(a5), [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8)                    \
    : [pitch] "r"(pitch), [rows] "r"(rows), [nb] "r"(nb), [skip] "r"(skip)                                       \
    : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", \
      "v17", "v18", "v19", "m0", "lc0", "sa0", "lc1", "sa1", "usr", "memory"

static void wg_rows_s2(int AL, int32_t *part, const struct dw_shape *s, const struct quad *xq, const struct quad *eq,
                       int ng, int cb, int add)
{
    HVX_Vector a0 = Q6_V_vzero(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0;
    const int pitch = xq->pitch, xrow = xq->cols * pitch, rows = s->oh, nb = s->ow / 2;
    const int skip = (2 * xq->cols - 2 * s->ow - 3) * pitch;   /* past column 2 OW + 2 to column 0 two rows down */
    for (int gi = 0; gi < ng; gi++) {
        const int8_t *x0 = xq->buf + gi * xq->rows * xrow + cb * HVX_BYTES, *x1 = x0 + xrow, *x2 = x1 + xrow;
        const int8_t *e = eq->buf + gi * eq->rows * eq->cols * pitch + cb * HVX_BYTES;
        if (AL)
            __asm__ volatile(
                "{ m0 = %[pitch] }\n"
                "{ v9 = vmem(%[e]++m0); loop1(2f, %[rows]) }\n"
                "2:\n"
                "{ v0 = vmem(%[x0]++m0) }\n"
                "{ v6 = vmem(%[x0]++m0) }\n"
                "{ v3 = vmem(%[x0]++m0) }\n"
                "{ v1 = vmem(%[x1]++m0) }\n"
                "{ v7 = vmem(%[x1]++m0) }\n"
                "{ v4 = vmem(%[x1]++m0) }\n"
                "{ v2 = vmem(%[x2]++m0) }\n"
                "{ v8 = vmem(%[x2]++m0) }\n"
                "{ v5 = vmem(%[x2]++m0); loop0(3f, %[nb]) }\n"
                "3:\n"
                "{ v10.w = vrmpy(v0.b,v9.b); v11.w = vrmpy(v1.b,v9.b); v19 = vmem(%[e]++m0) }\n"
                "{ v12.w = vrmpy(v2.b,v9.b); v13.w = vrmpy(v6.b,v9.b); v6 = vmem(%[x0]++m0); %[a0].w = vadd(%[a0].w,v10.w) }\n"
                "{ v14.w = vrmpy(v7.b,v9.b); v15.w = vrmpy(v8.b,v9.b); v7 = vmem(%[x1]++m0); %[a3].w = vadd(%[a3].w,v11.w) }\n"
                "{ v16.w = vrmpy(v3.b,v9.b); v17.w = vrmpy(v4.b,v9.b); v8 = vmem(%[x2]++m0); %[a6].w = vadd(%[a6].w,v12.w) }\n"
                "{ v18.w = vrmpy(v5.b,v9.b); v0 = vmem(%[x0]++m0); %[a1].w = vadd(%[a1].w,v13.w); %[a4].w = vadd(%[a4].w,v14.w) }\n"
                "{ v1 = vmem(%[x1]++m0); %[a7].w = vadd(%[a7].w,v15.w); %[a2].w = vadd(%[a2].w,v16.w); %[a5].w = vadd(%[a5].w,v17.w) }\n"
                "{ v2 = vmem(%[x2]++m0); %[a8].w = vadd(%[a8].w,v18.w) }\n"
                "{ v10.w = vrmpy(v3.b,v19.b); v11.w = vrmpy(v4.b,v19.b); v9 = vmem(%[e]++m0) }\n"
                "{ v12.w = vrmpy(v5.b,v19.b); v13.w = vrmpy(v6.b,v19.b); v6 = vmem(%[x0]++m0); %[a0].w = vadd(%[a0].w,v10.w) }\n"
                "{ v14.w = vrmpy(v7.b,v19.b); v15.w = vrmpy(v8.b,v19.b); v7 = vmem(%[x1]++m0); %[a3].w = vadd(%[a3].w,v11.w) }\n"
                "{ v16.w = vrmpy(v0.b,v19.b); v17.w = vrmpy(v1.b,v19.b); v8 = vmem(%[x2]++m0); %[a6].w = vadd(%[a6].w,v12.w) }\n"
                "{ v18.w = vrmpy(v2.b,v19.b); v3 = vmem(%[x0]++m0); %[a1].w = vadd(%[a1].w,v13.w); %[a4].w = vadd(%[a4].w,v14.w) }\n"
                "{ v4 = vmem(%[x1]++m0); %[a7].w = vadd(%[a7].w,v15.w); %[a2].w = vadd(%[a2].w,v16.w); %[a5].w = vadd(%[a5].w,v17.w) }\n"
                "{ v5 = vmem(%[x2]++m0); %[a8].w = vadd(%[a8].w,v18.w) }:endloop0\n"
                "{ %[x0] = add(%[x0],%[skip]); %[x1] = add(%[x1],%[skip]); %[x2] = add(%[x2],%[skip]) }:endloop1\n"
                WG3S2_OPERANDS);
        else
            __asm__ volatile(
                "{ m0 = %[pitch] }\n"
                "{ v9 = vmemu(%[e]++m0); loop1(2f, %[rows]) }\n"
                "2:\n"
                "{ v0 = vmemu(%[x0]++m0) }\n"
                "{ v6 = vmemu(%[x0]++m0) }\n"
                "{ v3 = vmemu(%[x0]++m0) }\n"
                "{ v1 = vmemu(%[x1]++m0) }\n"
                "{ v7 = vmemu(%[x1]++m0) }\n"
                "{ v4 = vmemu(%[x1]++m0) }\n"
                "{ v2 = vmemu(%[x2]++m0) }\n"
                "{ v8 = vmemu(%[x2]++m0) }\n"
                "{ v5 = vmemu(%[x2]++m0); loop0(3f, %[nb]) }\n"
                "3:\n"
                "{ v10.w = vrmpy(v0.b,v9.b); v11.w = vrmpy(v1.b,v9.b); v19 = vmemu(%[e]++m0) }\n"
                "{ v12.w = vrmpy(v2.b,v9.b); v13.w = vrmpy(v6.b,v9.b); v6 = vmemu(%[x0]++m0) }\n"
                "{ v14.w = vrmpy(v7.b,v9.b); v15.w = vrmpy(v8.b,v9.b); v7 = vmemu(%[x1]++m0) }\n"
                "{ v16.w = vrmpy(v3.b,v9.b); v17.w = vrmpy(v4.b,v9.b); v8 = vmemu(%[x2]++m0) }\n"
                "{ v18.w = vrmpy(v5.b,v9.b); v0 = vmemu(%[x0]++m0); %[a0].w = vadd(%[a0].w,v10.w) }\n"
                "{ v1 = vmemu(%[x1]++m0); %[a3].w = vadd(%[a3].w,v11.w); %[a6].w = vadd(%[a6].w,v12.w) }\n"
                "{ v2 = vmemu(%[x2]++m0); %[a1].w = vadd(%[a1].w,v13.w); %[a4].w = vadd(%[a4].w,v14.w) }\n"
                "{ %[a7].w = vadd(%[a7].w,v15.w); %[a2].w = vadd(%[a2].w,v16.w); %[a5].w = vadd(%[a5].w,v17.w); %[a8].w = vadd(%[a8].w,v18.w) }\n"
                "{ v10.w = vrmpy(v3.b,v19.b); v11.w = vrmpy(v4.b,v19.b); v9 = vmemu(%[e]++m0) }\n"
                "{ v12.w = vrmpy(v5.b,v19.b); v13.w = vrmpy(v6.b,v19.b); v6 = vmemu(%[x0]++m0) }\n"
                "{ v14.w = vrmpy(v7.b,v19.b); v15.w = vrmpy(v8.b,v19.b); v7 = vmemu(%[x1]++m0) }\n"
                "{ v16.w = vrmpy(v0.b,v19.b); v17.w = vrmpy(v1.b,v19.b); v8 = vmemu(%[x2]++m0) }\n"
                "{ v18.w = vrmpy(v2.b,v19.b); v3 = vmemu(%[x0]++m0); %[a0].w = vadd(%[a0].w,v10.w) }\n"
                "{ v4 = vmemu(%[x1]++m0); %[a3].w = vadd(%[a3].w,v11.w); %[a6].w = vadd(%[a6].w,v12.w) }\n"
                "{ v5 = vmemu(%[x2]++m0); %[a1].w = vadd(%[a1].w,v13.w); %[a4].w = vadd(%[a4].w,v14.w) }\n"
                "{ %[a7].w = vadd(%[a7].w,v15.w); %[a2].w = vadd(%[a2].w,v16.w); %[a5].w = vadd(%[a5].w,v17.w); %[a8].w = vadd(%[a8].w,v18.w) }:endloop0\n"
                "{ %[x0] = add(%[x0],%[skip]); %[x1] = add(%[x1],%[skip]); %[x2] = add(%[x2],%[skip]) }:endloop1\n"
                WG3S2_OPERANDS);
    }
    const HVX_Vector acc[9] = {a0, a1, a2, a3, a4, a5, a6, a7, a8};
    wg_store(part, s, acc, 9, cb, add);
}

void dspt_dw_wgrad_rows(int AL, int32_t *part, const struct dw_shape *s, const struct quad *xq, const struct quad *eq,
                        int ng, int cb, int add)
{
    if (s->stride == 1) wg_rows_s1(AL, part, s, xq, eq, ng, cb, add);
    else wg_rows_s2(AL, part, s, xq, eq, ng, cb, add);
}
