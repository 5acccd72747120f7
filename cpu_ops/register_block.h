// Accumulators that stay in registers: up to 24 vectors as named members, reached by a
// compile-time index (kernels walk them by template recursion). GCC 12 kept an array of
// accumulators (`__m512i acc[kI][kO]`) in memory across the loop of a register-blocked
// kernel, a store and a register copy after every vpdpwssd (LeNet-5's conv1 forward ran at
// a third of its vpdpwssd rate); named members it allocates to registers.
#pragma once
#include <cstddef>
#include <type_traits>

namespace dsptrain {

// 24 vectors of type V as named members; reg<i>(block) is member i
template <typename V>
struct Regs24 {
  V r0, r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, r11, r12, r13, r14, r15, r16, r17, r18, r19, r20, r21, r22, r23;
};

template <int I, typename V>
__attribute__((always_inline)) inline V& reg(Regs24<V>& b) {
  static_assert(I >= 0 && I < 24, "Regs24 holds 24 vectors");
  if constexpr (I < 12) {
    if constexpr (I == 0) return b.r0; else if constexpr (I == 1) return b.r1; else if constexpr (I == 2) return b.r2;
    else if constexpr (I == 3) return b.r3; else if constexpr (I == 4) return b.r4; else if constexpr (I == 5) return b.r5;
    else if constexpr (I == 6) return b.r6; else if constexpr (I == 7) return b.r7; else if constexpr (I == 8) return b.r8;
    else if constexpr (I == 9) return b.r9; else if constexpr (I == 10) return b.r10; else return b.r11;
  } else {
    if constexpr (I == 12) return b.r12; else if constexpr (I == 13) return b.r13; else if constexpr (I == 14) return b.r14;
    else if constexpr (I == 15) return b.r15; else if constexpr (I == 16) return b.r16; else if constexpr (I == 17) return b.r17;
    else if constexpr (I == 18) return b.r18; else if constexpr (I == 19) return b.r19; else if constexpr (I == 20) return b.r20;
    else if constexpr (I == 21) return b.r21; else if constexpr (I == 22) return b.r22; else return b.r23;
  }
}

// Calls body(std::integral_constant<int, R>{}) for R = rows in 1..8: a block's
// accumulators then have a count known at compile time and stay in registers (with a
// runtime count GCC kept them on the stack, a store and a reload per vpdpwssd)
template <typename Body>
inline void with_rows(int rows, Body body) {
  switch (rows) {
    case 1: return body(std::integral_constant<int, 1>{});
    case 2: return body(std::integral_constant<int, 2>{});
    case 3: return body(std::integral_constant<int, 3>{});
    case 4: return body(std::integral_constant<int, 4>{});
    case 5: return body(std::integral_constant<int, 5>{});
    case 6: return body(std::integral_constant<int, 6>{});
    case 7: return body(std::integral_constant<int, 7>{});
    default: return body(std::integral_constant<int, 8>{});
  }
}

}  // namespace dsptrain
