/* controls.c: the kept permutation controls of the lane kernels (vdelta / vrdelta),
 * shared by conv_lanes.c, conv_taps.c and conv_padded.c, in every build. */
#include "hvx-utils.h"
#include "kernels.h"

/* Permutation controls for vdelta (stages highest first) and vrdelta (lowest first):
 * stage o of either sets byte k to byte k ^ o of the stage's input where bit o of ctrl[k]
 * is set. A control depends on the shape alone and routing one costs thousands of scalar
 * packets, so each is routed once per server (or skel) lifetime and kept under a nonzero
 * key: direct-mapped slots; ops run one at a time on one context (its scratch is not
 * shared either), so they need no lock. */
#define KEPT_CONTROLS 32
static HVX_Vector kept_control[KEPT_CONTROLS];
static uint32_t kept_key[KEPT_CONTROLS];   /* 0: empty */

static uint32_t control_slot(uint32_t key) { return (key * 2654435761u) >> 27; }   /* Knuth's multiplicative hash, 5 bits */

static int kept(uint8_t ctrl[128], uint32_t key)
{
    uint32_t slot = control_slot(key);
    if (kept_key[slot] != key) return 0;
    hvx_store_u(ctrl, kept_control[slot]);
    return 1;
}

/* Route byte pos[e] to dst[e] for e < count, each by the bits of (position ^ destination),
 * stage by stage, and keep the control. Conflict free when no two routes meet at a
 * position holding different bytes: monotone spreads and compactions (Hilewitz and Lee,
 * ASAP 2006), and copies of one byte within a group that the routes never leave. */
static void route(uint8_t ctrl[128], uint8_t *pos, const uint8_t *dst, int count, int high_first, uint32_t key)
{
    for (int i = 0; i < 128; i++) ctrl[i] = 0;
    for (int stage = 0; stage < 7; stage++) {
        int o = high_first ? 64 >> stage : 1 << stage;
        for (int e = 0; e < count; e++)
            if ((pos[e] ^ dst[e]) & o) {
                pos[e] ^= (uint8_t)o;
                ctrl[pos[e]] |= (uint8_t)o;
            }
    }
    uint32_t slot = control_slot(key);
    kept_control[slot] = hvx_load_u(ctrl);
    kept_key[slot] = key;
}

/* Byte q * from + b to q * to + b (b < k, q < groups): a spread (from < to) for vdelta, a
 * compaction (from > to) for vrdelta. Key: the four sizes (groups <= 128). */
void dspt_restride_control(uint8_t ctrl[128], int k, int from, int to, int groups)
{
    uint32_t key = (uint32_t)k | (uint32_t)from << 8 | (uint32_t)to << 16 | (uint32_t)groups << 24;
    if (kept(ctrl, key)) return;
    uint8_t pos[128], dst[128];
    int count = 0;
    for (int q = 0; q < groups; q++)
        for (int b = 0; b < k; b++) {
            pos[count] = (uint8_t)(q * from + b);
            dst[count++] = (uint8_t)(q * to + b);
        }
    route(ctrl, pos, dst, count, from < to, key);
}

/* Word `word` of every group of `words` words (a power of two) to all the group's words,
 * for vrdelta. Key: 255 in the top byte, which a restride's group count never reaches. */
void dspt_broadcast_control(uint8_t ctrl[128], int word, int words)
{
    uint32_t key = 0xFF000000u | (uint32_t)word << 8 | (uint32_t)words;
    if (kept(ctrl, key)) return;
    uint8_t pos[128], dst[128];
    for (int d = 0; d < 128; d++) {
        int group = d / (4 * words);
        pos[d] = (uint8_t)((group * words + word) * 4 + d % 4);
        dst[d] = (uint8_t)d;
    }
    route(ctrl, pos, dst, 128, 0, key);
}
