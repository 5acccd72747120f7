// Which SIMD instruction sets this CPU offers, asked of the CPU itself (cpuid / hwcaps),
// so the kernels can pick a path at run time.
#include "cpu_features.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace dsptrain {

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = f.avx512f && __builtin_cpu_supports("avx512bw");
  f.avx512vl = f.avx512f && __builtin_cpu_supports("avx512vl");
  f.avx512vbmi = f.avx512f && __builtin_cpu_supports("avx512vbmi");
  f.avx512_vnni = f.avx512bw && __builtin_cpu_supports("avx512vnni");
  unsigned a = 0, b = 0, c = 0, d = 0;
  // AVX-VNNI is CPUID leaf 7, sub-leaf 1, EAX bit 4 (not all compilers know the name).
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx_vnni = (a >> 4) & 1;
  // AMX-TILE and AMX-INT8 are CPUID leaf 7, sub-leaf 0, EDX bits 24 and 25.
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) f.amx_int8 = ((d >> 24) & 1) && ((d >> 25) & 1);
#endif
#if defined(__aarch64__) && defined(__linux__)
  // The kernel's hwcap bits (asm/hwcap.h), spelled as numbers: an older libc's headers lack
  // the newer names, and the bits never move.
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  const auto bit = [](unsigned long word, int n) { return ((word >> n) & 1) != 0; };
  f.neon = bit(hwcap, 1);           // HWCAP_ASIMD
  f.neon_fp16 = bit(hwcap, 10);     // HWCAP_ASIMDHP
  f.neon_dotprod = bit(hwcap, 20);  // HWCAP_ASIMDDP
  f.sve = bit(hwcap, 22);           // HWCAP_SVE
  f.sve2 = bit(hwcap2, 1);          // HWCAP2_SVE2
  f.i8mm = bit(hwcap2, 13);         // HWCAP2_I8MM
  f.bf16 = bit(hwcap2, 14);         // HWCAP2_BF16
#endif
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect_cpu_features();
  return features;
}

bool amx_permitted() {
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__linux__)
  static const bool permitted = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // asm/prctl.h, the XSAVE feature number
    return detect_cpu_features().amx_int8 && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return permitted;
#else
  return false;
#endif
}

}  // namespace dsptrain
