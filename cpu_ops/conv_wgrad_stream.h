// The im2col weight gradient with its patches packed just before use (conv_wgrad_stream.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "conv_shapes.h"

namespace dsptrain {

// The im2col weight gradient with the patches packed one B panel and K block at a time,
// just before use (conv_wgrad_stream.cpp): err_t is err^T biased (a + 128), rows `ld`
// apart, read in place; dw[o, kh * kw * ch]. Where whole panels lie in one tap row.
// Trimmed (`trim`: where the padded source holds x; stride 1), err_t's pixels go position
// by position, (oy, ox, image), and each panel reduces over only the pixels whose tap
// lands in the window (wgrad_stream_trimmed_fit: whole panels within a tap's channels,
// images in whole groups of 4).
bool wgrad_stream_fit(const ConvShape& s);
bool wgrad_stream_trimmed_fit(const ConvShape& s);
void conv_wgrad_stream(const PaddedSrc& src, const uint8_t* err_t, ptrdiff_t ld, int o, int32_t* dw,
                       const SourceWindow* trim = nullptr);
size_t wgrad_stream_panel_bytes();   // per pool thread

}  // namespace dsptrain
