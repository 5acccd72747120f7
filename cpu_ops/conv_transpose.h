// Byte-matrix transposes of the convolutions' operands (conv_transpose.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace dsptrain {

// dst[cols, rows] = src[rows, cols]^T (^ bias; dst's rows dst_ld >= rows bytes apart, 0:
// rows), on the pool in bands of rows, 16 x 16 blocks in registers (conv.cpp).
void transpose(const int8_t* src, ptrdiff_t rows, ptrdiff_t cols, int8_t* dst, uint8_t bias = 0, ptrdiff_t dst_ld = 0);

// dst[c * dst_ld + r] = src[r * src_ld + c] ^ bias for r < rows, c < cols, on the calling
// thread, in cache-sized blocks.
void transpose_block(const int8_t* __restrict src, ptrdiff_t src_ld, ptrdiff_t rows, ptrdiff_t cols,
                     int8_t* __restrict dst, ptrdiff_t dst_ld, uint8_t bias = 0);

// err[n, positions, o] -> dst[o, position * n + image] ^ bias (rows ld apart): err^T with
// its pixels position by position, as the trimmed weight-gradient stream reads it.
void transpose_by_position(const int8_t* err, int n, int positions, int o, int8_t* dst, ptrdiff_t ld, uint8_t bias);

}  // namespace dsptrain
