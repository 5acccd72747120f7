// The int8 GEMM: c[M,N] (int32) = a[M,K] @ b[N,K]^T, with b (the weights) packed once
// into panels for the chosen instruction set. Kernels are picked at run time from the
// CPU's features (cpu_features.h); DSPTRAIN_CPU_ISA forces one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dsptrain {

struct FusedRequant;  // requant.h: the rounding pass done by the product's tasks

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512Vnni = 3, kNeonDot = 4, kAmx = 5 };

const char* isa_name(Isa isa);
bool isa_from_name(const std::string& name, Isa* out);
bool isa_supported(Isa isa);  // compiled in and offered by this CPU
Isa best_isa();
Isa active_isa();             // what new packings use
void set_active_isa(Isa isa);

// A strided int8 matrix view: element (r, k) is at row(r)[k * k_stride], row(r) =
// data + r * row_stride. With group_rows > 0 the rows come in groups of that many
// (group_stride bytes apart), image_rows of them an image (image_stride bytes apart), the
// view starting `phase` rows into its first image: a strided 1x1 convolution's A, every
// s-th pixel of every s-th image row, read in place.
struct MatrixS8 {
  const int8_t* data;
  ptrdiff_t row_stride, k_stride;
  int group_rows = 0, image_rows = 0, phase = 0;
  ptrdiff_t group_stride = 0, image_stride = 0;

  const int8_t* row(int r) const {
    if (group_rows == 0) return data + static_cast<ptrdiff_t>(r) * row_stride;
    const int q = phase + r, in_image = q % image_rows;
    return data + static_cast<ptrdiff_t>(q / image_rows) * image_stride +
           static_cast<ptrdiff_t>(in_image / group_rows) * group_stride +
           static_cast<ptrdiff_t>(in_image % group_rows) * row_stride;
  }
  // The view from row r (and depth kk) on.
  MatrixS8 from(int r, int kk = 0) const {
    MatrixS8 v = *this;
    if (group_rows == 0) {
      v.data = row(r) + static_cast<ptrdiff_t>(kk) * k_stride;
    } else {
      v.data = data + static_cast<ptrdiff_t>((phase + r) / image_rows) * image_stride + static_cast<ptrdiff_t>(kk) * k_stride;
      v.phase = (phase + r) % image_rows;
    }
    return v;
  }
};

// b[N,K] repacked into panels of `nr` columns: panel p holds, for each group of 4 k,
// nr columns x 4 bytes (zero padded), the layout every int8 dot-product instruction
// (vpdpbusd, sdot, AMX's B tiles) reads in one load; k_pad is K rounded up to what the
// kernel steps by (4, or 64 for AMX). `col_offset` is -128 * colsum(b): the correction
// of the VNNI offset trick (zero for ISAs that multiply signed by signed).
struct PackedB {
  Isa isa = Isa::kScalar;
  int n = 0, k = 0, nr = 1, k_pad = 0;
  std::vector<int8_t> data;  // the panels, from its first 64-byte boundary (panels())
  std::vector<int32_t> col_offset;
  // Cache-line aligned, so no row of a B tile or vector load straddles two lines.
  const int8_t* panels() const { return align64(data.data()); }
  int8_t* panels() { return align64(data.data()); }

  static constexpr size_t kAlignSlack = 64;
  template <typename T>
  static T* align64(T* p) {
    return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~static_cast<uintptr_t>(63));
  }
};

// The ISA whose kernel runs a GEMM of depth k on path `isa`: AMX hands very short K to
// AVX-512 VNNI (its tiles step 64 k at a time; at K = 27, the first convolution of an RGB
// network, most of every tile product would be padding).
Isa gemm_isa(Isa isa, int k);

// Packs for gemm_isa(isa, k) (out->isa says which).
void pack_b(MatrixS8 b, int n, int k, Isa isa, PackedB* out);

// pack_b of a b whose depth rows are contiguous in `segments` equal pieces (a multiple of
// 4 columns each, or one piece): row(ctx, kk, seg) points at piece `seg` of b[0..n) at
// depth kk (a transposed matrix; per-tap slices of convolution weights; the tap rows of
// a patch in the padded source). Only where pack_b_k_rows_fits (int32 panel offsets).
using KRowFn = const int8_t* (*)(const void* ctx, int kk, int seg);
void pack_b_k_rows(int n, int k, Isa isa, KRowFn row, const void* ctx, PackedB* out, int segments = 1);
bool pack_b_k_rows_fits(int n, int k, Isa isa);

// Bytes a PackedB of b[n, k] holds on `isa` (panels, alignment slack, column offsets).
size_t packed_b_bytes(int n, int k, Isa isa);

// c (row stride ldc) = a[M,K] @ packed^T. K is packed.k; K * 128 * 128 must fit int32.
// `a_padded`: the caller guarantees a's rows are a_row_bytes(isa, K) apart, zero after
// K, and readable up to a_rows(isa, M): kernels whose packed A is plain rows (AMX) then
// read a in place, with no packing pass.
// `absmax`, if given, receives max |c| (each task's share taken while it is in cache).
// `fused` (with absmax, and ldc == n): each task also rounds its tile into fused->out.
void gemm_packed(MatrixS8 a, int m, const PackedB& b, int32_t* c, ptrdiff_t ldc, bool a_padded = false,
                 int64_t* absmax = nullptr, FusedRequant* fused = nullptr);
// The A blocks (a task's rows x one K block) gemm_packed has multiplied, by kernel: the
// signed one, and the unsigned one AVX2 runs where a block holds no negative value (its
// vpmaddubsw products are exact there). Read, and zeroed with `reset`, by the tests that
// pin which kernel a block takes.
struct GemmBlockCounts {
  long long signed_blocks, unsigned_blocks;
};
GemmBlockCounts gemm_block_counts(bool reset);
int a_row_bytes(Isa isa, int k);
int a_rows(Isa isa, int m);

// Convenience: packs b into a per-thread scratch and multiplies; int64 output sums
// int32 products over chunks of K short enough not to overflow.
void gemm_s8_s32(MatrixS8 a, MatrixS8 b, int m, int n, int k, int32_t* c, bool a_padded = false,
                 int64_t* absmax = nullptr, FusedRequant* fused = nullptr);
void gemm_s8_s64(MatrixS8 a, MatrixS8 b, int m, int n, int k, int64_t* c);

// A given in place as biased bytes (a + 128, the offset trick's unsigned side), for the
// implicit-GEMM convolutions: row r's depth is `segments` runs of `seg_len` bytes (a
// multiple of 4 unless there is one run), run s at data + row_base(ctx, r) + s * seg_stride.
// The group that ends a run may read up to 3 bytes beyond it (B is zero there).
struct BiasedRows {
  const uint8_t* data;
  int segments, seg_len;
  ptrdiff_t seg_stride;
  ptrdiff_t (*row_base)(const void* ctx, int row);
  const void* ctx;
};

// Whether gemm_rows can run b's kernel (it reads A in place: AVX-512 VNNI).
bool gemm_rows_supported(const PackedB& b);

// c (row stride ldc) = a @ b^T over b.k = segments * seg_len, with no packing of A;
// `absmax` and `fused` as gemm_packed's. Only where gemm_rows_supported(b).
void gemm_rows(const BiasedRows& a, int m, const PackedB& b, int32_t* c, ptrdiff_t ldc, int64_t* absmax = nullptr,
               FusedRequant* fused = nullptr);

// Longest K whose int8 x int8 dot products (-128 included) always fit int32.
constexpr int kMaxInt32Depth = 131068;  // 131068 * 128 * 128 < 2^31

}  // namespace dsptrain
