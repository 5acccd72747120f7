// A plain C++ driver for the CPU kernels, without Python: it lets a cross-built copy of
// cpu_ops/ (every source but the bindings*.cpp, unchanged) run where the Python extension
// cannot, e.g. the aarch64 NEON path under qemu-aarch64 on an x86-64 machine
// (tests/backend/test_neon_cross.py builds and runs it).
//
//   kernel_check IN OUT     (DSPTRAIN_CPU_ISA=neon forces a path, as for the extension)
//
// IN is a sequence of records, each 12 little-endian int32 -- op, bytes per output
// element (4: int32, 8: int64), then the op's sizes -- followed by its int8 operands:
//   op 0 gemm            m n k                       a[m,k] b[n,k]   -> a @ b^T [m,n]
//   op 1 conv forward    n h w c o kh kw stride pad  x w             -> y[n,oh,ow,o]
//   op 2 conv bwd data   (the same sizes)            err w           -> dx[n,h,w,c]
//   op 3 conv bwd weight (the same sizes)            err x           -> dw[o,kh,kw,c]
//   op 4 depthwise forward     n h w c kh kw stride pad   x w[c,kh,kw]  -> y[n,oh,ow,c]
//   op 5 depthwise bwd data    (the same sizes)           err w         -> dx[n,h,w,c]
//   op 6 depthwise bwd weight  (the same sizes)           err x         -> dw[c,kh,kw]
//   ops 7, 8, 9: ops 4, 5, 6 in float32 (operands and result 4-byte floats)
//   op 10 NITI's fused batch norm, forward then backward (bn_cast.h): rows channels ex ee act
//         (0 none, 1 clip to [0, 6], 2 relu); int8 x[rows,c], err[rows,c], then float32
//         gamma, beta, mean, var [c]  -> float64 [ey, edx, d_gamma[c], d_beta[c], y, dx]
//         (training, momentum 0.1, eps 1e-5, round to nearest)
//   op 11 grouped forward    n h w c o k stride pad dilation groups  x w[o,k,k,c/groups] -> y[n,oh,ow,o]
//   op 12 grouped bwd data   (the same sizes)                        err w -> dx[n,h,w,c]
//   op 13 grouped bwd weight (the same sizes)                        err x -> dw[o,k,k,c/groups]
// OUT gets each record's result, in order. stdout says which path ran: one line
// "isa <active> best <best>", then per convolution record "conv <algorithm>", per
// depthwise record "dwconv <loop>", per grouped record "grouped <algorithm>".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bn_cast.h"
#include "conv.h"
#include "conv_grouped.h"
#include "dwconv.h"
#include "gemm.h"

namespace {

using dsptrain::ConvPass;
using dsptrain::ConvShape;

enum Op : int32_t {
  kGemm = 0, kConvForward = 1, kConvBackwardData = 2, kConvBackwardWeight = 3,
  kDwForward = 4, kDwBackwardData = 5, kDwBackwardWeight = 6, kDwForwardF32 = 7, kDwBackwardDataF32 = 8,
  kDwBackwardWeightF32 = 9, kBnAct = 10, kGroupedForward = 11, kGroupedBackwardData = 12, kGroupedBackwardWeight = 13
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "kernel_check: %s\n", message.c_str());
  std::exit(2);
}

std::vector<int8_t> read_bytes(std::FILE* f, long long count, const char* what) {
  std::vector<int8_t> v(static_cast<size_t>(count));
  if (count > 0 && std::fread(v.data(), 1, v.size(), f) != v.size())
    die(std::string("input ends inside ") + what + " (" + std::to_string(count) + " bytes expected)");
  return v;
}

// Runs `kernel(T* out)` for the element type the record asked for, appends the result.
template <typename Kernel>
void run_acc(int acc_bytes, long long count, std::FILE* out, Kernel kernel) {
  if (acc_bytes == 8) {
    std::vector<int64_t> r(static_cast<size_t>(count));
    kernel(r.data());
    std::fwrite(r.data(), sizeof(int64_t), r.size(), out);
  } else if (acc_bytes == 4) {
    std::vector<int32_t> r(static_cast<size_t>(count));
    kernel(r.data());
    std::fwrite(r.data(), sizeof(int32_t), r.size(), out);
  } else {
    die("output element size " + std::to_string(acc_bytes) + " is not 4 or 8");
  }
}

void run_gemm(const int32_t* p, int acc_bytes, std::FILE* in, std::FILE* out) {
  const int m = p[0], n = p[1], k = p[2];
  const std::vector<int8_t> a = read_bytes(in, 1LL * m * k, "gemm a"), b = read_bytes(in, 1LL * n * k, "gemm b");
  const dsptrain::MatrixS8 av{a.data(), k, 1}, bv{b.data(), k, 1};
  run_acc(acc_bytes, 1LL * m * n, out, [&](auto* c) {
    if constexpr (sizeof(*c) == 8) dsptrain::gemm_s8_s64(av, bv, m, n, k, c);
    else dsptrain::gemm_s8_s32(av, bv, m, n, k, c);
  });
}

void run_conv(Op op, const int32_t* p, int acc_bytes, std::FILE* in, std::FILE* out) {
  const ConvShape s{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]};
  const long long x_size = 1LL * s.n * s.h * s.w * s.c, w_size = 1LL * s.o * s.kh * s.kw * s.c;
  const long long err_size = 1LL * s.n * s.oh() * s.ow() * s.o;
  const ConvPass pass = op == kConvForward        ? ConvPass::kForward
                        : op == kConvBackwardData ? ConvPass::kBackwardData
                                                  : ConvPass::kBackwardWeight;
  std::printf("conv %s\n", dsptrain::conv_algorithm(pass, s));
  if (op == kConvForward) {
    const std::vector<int8_t> x = read_bytes(in, x_size, "conv x"), w = read_bytes(in, w_size, "conv w");
    run_acc(acc_bytes, err_size, out, [&](auto* y) { dsptrain::conv2d_fwd(x.data(), w.data(), s, y); });
  } else if (op == kConvBackwardData) {
    const std::vector<int8_t> err = read_bytes(in, err_size, "conv err"), w = read_bytes(in, w_size, "conv w");
    run_acc(acc_bytes, x_size, out, [&](auto* dx) { dsptrain::conv2d_bwd_data(err.data(), w.data(), s, dx); });
  } else {
    const std::vector<int8_t> err = read_bytes(in, err_size, "conv err"), x = read_bytes(in, x_size, "conv x");
    run_acc(acc_bytes, w_size, out, [&](auto* dw) { dsptrain::conv2d_bwd_weight(err.data(), x.data(), s, dw); });
  }
}

void run_grouped(Op op, const int32_t* p, int acc_bytes, std::FILE* in, std::FILE* out) {
  const dsptrain::GroupedConv g{ConvShape{p[0], p[1], p[2], p[3], p[4], p[5], p[5], p[6], p[7]}, p[9], p[8]};
  const ConvShape& s = g.s;
  const long long x_size = 1LL * s.n * s.h * s.w * s.c, w_size = 1LL * s.o * s.kh * s.kw * g.cg();
  const long long err_size = 1LL * s.n * g.oh() * g.ow() * s.o;
  const ConvPass pass = op == kGroupedForward        ? ConvPass::kForward
                        : op == kGroupedBackwardData ? ConvPass::kBackwardData
                                                     : ConvPass::kBackwardWeight;
  std::printf("grouped %s\n", dsptrain::grouped_algorithm(pass, g));
  if (op == kGroupedForward) {
    const std::vector<int8_t> x = read_bytes(in, x_size, "grouped x"), w = read_bytes(in, w_size, "grouped w");
    run_acc(acc_bytes, err_size, out, [&](auto* y) { dsptrain::conv2d_grouped_fwd(x.data(), w.data(), g, y); });
  } else if (op == kGroupedBackwardData) {
    const std::vector<int8_t> err = read_bytes(in, err_size, "grouped err"), w = read_bytes(in, w_size, "grouped w");
    run_acc(acc_bytes, x_size, out, [&](auto* dx) { dsptrain::conv2d_grouped_bwd_data(err.data(), w.data(), g, dx); });
  } else {
    const std::vector<int8_t> err = read_bytes(in, err_size, "grouped err"), x = read_bytes(in, x_size, "grouped x");
    run_acc(acc_bytes, w_size, out, [&](auto* dw) { dsptrain::conv2d_grouped_bwd_weight(err.data(), x.data(), g, dw); });
  }
}

template <typename T>
std::vector<T> read_values(std::FILE* f, long long count, const char* what) {
  std::vector<T> v(static_cast<size_t>(count));
  if (count > 0 && std::fread(v.data(), sizeof(T), v.size(), f) != v.size())
    die(std::string("input ends inside ") + what + " (" + std::to_string(count) + " values expected)");
  return v;
}

void run_depthwise(Op op, const int32_t* p, int acc_bytes, std::FILE* in, std::FILE* out) {
  const dsptrain::DwShape s{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
  const long long x_size = 1LL * s.n * s.h * s.w * s.c, w_size = 1LL * s.c * s.kh * s.kw;
  const long long err_size = 1LL * s.n * s.oh() * s.ow() * s.c;
  const int pass = (op - kDwForward) % 3;
  std::printf("dwconv %s\n", dsptrain::dwconv_path(static_cast<dsptrain::DwPass>(pass), s));
  if (op >= kDwForwardF32) {
    if (acc_bytes != 4) die("a float32 depthwise record's output is 4 bytes an element");
    const auto a = read_values<float>(in, pass == 0 ? x_size : err_size, "depthwise operand");
    const auto b = read_values<float>(in, pass == 2 ? x_size : w_size, "depthwise operand");
    std::vector<float> r(static_cast<size_t>(pass == 0 ? err_size : pass == 1 ? x_size : w_size));
    if (pass == 0) dsptrain::dwconv2d_fwd_f32(a.data(), b.data(), s, r.data());
    else if (pass == 1) dsptrain::dwconv2d_bwd_data_f32(a.data(), b.data(), s, r.data());
    else dsptrain::dwconv2d_bwd_weight_f32(a.data(), b.data(), s, r.data());
    std::fwrite(r.data(), sizeof(float), r.size(), out);
    return;
  }
  const auto a = read_bytes(in, pass == 0 ? x_size : err_size, "depthwise operand");
  const auto b = read_bytes(in, pass == 2 ? x_size : w_size, "depthwise operand");
  if (pass == 2) {
    run_acc(acc_bytes, w_size, out, [&](auto* dw) { dsptrain::dwconv2d_bwd_weight(a.data(), b.data(), s, dw); });
    return;
  }
  if (acc_bytes != 4) die("a depthwise forward or backward-data record's output is int32");
  std::vector<int32_t> r(static_cast<size_t>(pass == 0 ? err_size : x_size));
  if (pass == 0) dsptrain::dwconv2d_fwd(a.data(), b.data(), s, r.data());
  else dsptrain::dwconv2d_bwd_data(a.data(), b.data(), s, r.data());
  std::fwrite(r.data(), sizeof(int32_t), r.size(), out);
}

void run_bn_act(const int32_t* p, int out_bytes, std::FILE* in, std::FILE* out) {
  if (out_bytes != 8) die("a batch norm record's output is float64");
  const size_t rows = size_t(p[0]), c = size_t(p[1]);
  const auto x = read_bytes(in, 1LL * rows * c, "bn x"), err = read_bytes(in, 1LL * rows * c, "bn err");
  const auto gamma = read_values<float>(in, c, "bn gamma"), beta = read_values<float>(in, c, "bn beta");
  const auto mean = read_values<float>(in, c, "bn mean"), var = read_values<float>(in, c, "bn var");
  const dsptrain::BnActFn act{static_cast<dsptrain::BnAct>(p[4]), 0.0, 6.0};
  const dsptrain::RngKey key{};
  std::vector<int8_t> y(rows * c), dx(rows * c);
  std::vector<double> stats(2 * c);
  std::vector<float> new_mean(c), new_var(c), d_gamma(c), d_beta(c);
  int ey = 0, edx = 0;
  dsptrain::bn_act_s8(x.data(), rows, c, p[2], gamma.data(), beta.data(), mean.data(), var.data(), true, 0.1, 1e-5,
                      act, dsptrain::FloatRound::kRound, key, y.data(), &ey, stats.data(), new_mean.data(),
                      new_var.data());
  dsptrain::bn_act_bwd_s8(err.data(), p[3], x.data(), p[2], rows, c, stats.data(), gamma.data(), beta.data(), act,
                          dsptrain::FloatRound::kRound, key, dx.data(), &edx, d_gamma.data(), d_beta.data());
  std::vector<double> r{double(ey), double(edx)};
  r.insert(r.end(), d_gamma.begin(), d_gamma.end());
  r.insert(r.end(), d_beta.begin(), d_beta.end());
  r.insert(r.end(), y.begin(), y.end());
  r.insert(r.end(), dx.begin(), dx.end());
  std::fwrite(r.data(), sizeof(double), r.size(), out);
}

// DSPTRAIN_CPU_ISA, checked as the extension's set_isa checks it.
void force_isa_from_env() {
  const char* forced = std::getenv("DSPTRAIN_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return;
  dsptrain::Isa isa;
  if (!dsptrain::isa_from_name(forced, &isa)) die(std::string("DSPTRAIN_CPU_ISA=") + forced + " is not an ISA name");
  if (!dsptrain::isa_supported(isa))
    die(std::string("DSPTRAIN_CPU_ISA=") + forced + " is not supported by this CPU or build");
  dsptrain::set_active_isa(isa);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) die("usage: kernel_check IN OUT");
  force_isa_from_env();
  std::printf("isa %s best %s\n", dsptrain::isa_name(dsptrain::active_isa()), dsptrain::isa_name(dsptrain::best_isa()));
  std::FILE* in = std::fopen(argv[1], "rb");
  if (in == nullptr) die(std::string("cannot open input ") + argv[1]);
  std::FILE* out = std::fopen(argv[2], "wb");
  if (out == nullptr) die(std::string("cannot create output ") + argv[2]);
  int32_t header[12];
  for (int record = 0;; ++record) {
    const size_t got = std::fread(header, sizeof(int32_t), 12, in);
    if (got == 0) break;
    if (got != 12) die("record " + std::to_string(record) + ": header cut short");
    const Op op = static_cast<Op>(header[0]);
    if (op == kGemm) run_gemm(header + 2, header[1], in, out);
    else if (op >= kConvForward && op <= kConvBackwardWeight) run_conv(op, header + 2, header[1], in, out);
    else if (op >= kDwForward && op <= kDwBackwardWeightF32) run_depthwise(op, header + 2, header[1], in, out);
    else if (op == kBnAct) run_bn_act(header + 2, header[1], in, out);
    else if (op >= kGroupedForward && op <= kGroupedBackwardWeight) run_grouped(op, header + 2, header[1], in, out);
    else die("record " + std::to_string(record) + ": unknown op " + std::to_string(header[0]));
  }
  std::fclose(in);
  if (std::fclose(out) != 0) die(std::string("writing ") + argv[2] + " failed");
  return 0;
}
