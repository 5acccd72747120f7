// The AVX2 int8 GEMM's candidate inner loops alone, operands in L1, on the calling
// thread's CPU time (docs/depthwise.md, "The int8 GEMM on AVX2"): today's int16 vpmaddwd
// loop and three variants of it (B already widened, 4x12 with B as a memory operand, A
// stored pre-broadcast), the unsigned-byte vpmaddubsw loop at 6x8 (built), 12x8 and 6x16,
// and the sign trick (vpsignb per product vector). Each loop head is aligned to 64 bytes:
// unaligned, the same int16 body measured 71 or 81 GMAC/s by where it fell. Not part of
// the package:
//     g++ -O2 -o /tmp/gemm_avx2_loops bench/gemm_avx2_loops.cpp && /tmp/gemm_avx2_loops
// Each loop runs a whole K = 512 in one asm block with the accumulators in ymm0-ymm11, so
// the compiler cannot spill them; results are summed into `out` only to keep them live.
#include <immintrin.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <ctime>
static double now(){timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t); return t.tv_sec+t.tv_nsec*1e-9;}
constexpr int G = 128; // kgroups -> K=512
alignas(64) int16_t A16[G*6*4];
alignas(64) uint8_t A8[G*12*4];
alignas(64) int8_t S8[G*12*4];
alignas(64) int8_t B[G*16*4];
alignas(64) int16_t ones[16];
alignas(64) int16_t B16[G*12*4];
alignas(64) int16_t A16B[G*6*16];

#define ACC_CLOB "ymm0","ymm1","ymm2","ymm3","ymm4","ymm5","ymm6","ymm7","ymm8","ymm9","ymm10","ymm11","ymm12","ymm13","ymm14","ymm15"
__attribute__((target("avx2"),noinline)) void k_ub6(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqa %%ymm0,%%ymm6\n vmovdqa %%ymm0,%%ymm7\n vmovdqa %%ymm0,%%ymm8\n vmovdqa %%ymm0,%%ymm9\n vmovdqa %%ymm0,%%ymm10\n vmovdqa %%ymm0,%%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    ".p2align 6\n2:\n vmovdqu (%%rbx), %%ymm12\n vmovdqu 32(%%rbx), %%ymm13\n"
#define R(r,x,y) " vpbroadcastd " #r "*4(%%rax), %%ymm14\n vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n vpmaddwd (%[ones]), %%ymm15, %%ymm15\n vpaddd %%ymm15, %%ymm" #x ", %%ymm" #x "\n vpmaddubsw %%ymm13, %%ymm14, %%ymm15\n vpmaddwd (%[ones]), %%ymm15, %%ymm15\n vpaddd %%ymm15, %%ymm" #y ", %%ymm" #y "\n"
    R(0,0,1) R(1,2,3) R(2,4,5) R(3,6,7) R(4,8,9) R(5,10,11)
#undef R
    " add $24, %%rax\n add $64, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm11, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A8),[B]"r"(B),[ones]"r"(ones),[st]"r"(st) : "rax","rbx","rcx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}
__attribute__((target("avx2"),noinline)) void k_sg12(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqa %%ymm0,%%ymm6\n vmovdqa %%ymm0,%%ymm7\n vmovdqa %%ymm0,%%ymm8\n vmovdqa %%ymm0,%%ymm9\n vmovdqa %%ymm0,%%ymm10\n vmovdqa %%ymm0,%%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[S], %%rdx\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    ".p2align 6\n2:\n vmovdqu (%%rbx), %%ymm12\n"
#define R(r) " vpbroadcastd " #r "*4(%%rdx), %%ymm15\n vpsignb %%ymm15, %%ymm12, %%ymm15\n vpbroadcastd " #r "*4(%%rax), %%ymm14\n vpmaddubsw %%ymm15, %%ymm14, %%ymm15\n vpmaddwd (%[ones]), %%ymm15, %%ymm15\n vpaddd %%ymm15, %%ymm" #r ", %%ymm" #r "\n"
    R(0) R(1) R(2) R(3) R(4) R(5) R(6) R(7) R(8) R(9) R(10) R(11)
#undef R
    " add $48, %%rax\n add $48, %%rdx\n add $32, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm11, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A8),[S]"r"(S8),[B]"r"(B),[ones]"r"(ones),[st]"r"(st) : "rax","rbx","rcx","rdx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}

__attribute__((target("avx2"),noinline)) void k_wd2(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqa %%ymm0,%%ymm6\n vmovdqa %%ymm0,%%ymm7\n vmovdqa %%ymm0,%%ymm8\n vmovdqa %%ymm0,%%ymm9\n vmovdqa %%ymm0,%%ymm10\n vmovdqa %%ymm0,%%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    ".p2align 6\n2:\n vpmovsxbw (%%rbx), %%ymm12\n vpmovsxbw 16(%%rbx), %%ymm13\n"
#define R(r,x,y) " vpbroadcastq " #r "*8(%%rax), %%ymm14\n vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm" #x ", %%ymm" #x "\n vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm" #y ", %%ymm" #y "\n"
    R(0,0,1) R(1,2,3) R(2,4,5) R(3,6,7) R(4,8,9) R(5,10,11)
#undef R
    " add $48, %%rax\n add $32, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm11, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A16),[B]"r"(B),[st]"r"(st) : "rax","rbx","rcx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}
__attribute__((target("avx2"),noinline)) void k_ub12b(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqa %%ymm0,%%ymm6\n vmovdqa %%ymm0,%%ymm7\n vmovdqa %%ymm0,%%ymm8\n vmovdqa %%ymm0,%%ymm9\n vmovdqa %%ymm0,%%ymm10\n vmovdqa %%ymm0,%%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    ".p2align 6\n2:\n vmovdqu (%%rbx), %%ymm12\n"
#define R(r) " vpbroadcastd " #r "*4(%%rax), %%ymm14\n vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n vpmaddwd (%[ones]), %%ymm15, %%ymm15\n vpaddd %%ymm15, %%ymm" #r ", %%ymm" #r "\n"
    R(0) R(1) R(2) R(3) R(4) R(5) R(6) R(7) R(8) R(9) R(10) R(11)
#undef R
    " add $48, %%rax\n add $32, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm11, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A8),[B]"r"(B),[ones]"r"(ones),[st]"r"(st) : "rax","rbx","rcx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}

__attribute__((target("avx2"),noinline)) void k_ub6x8(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqu (%[ones]), %%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    ".p2align 6\n2:\n vmovdqu (%%rbx), %%ymm12\n"
#define R(r) " vpbroadcastd " #r "*4(%%rax), %%ymm14\n vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n vpmaddwd %%ymm11, %%ymm15, %%ymm15\n vpaddd %%ymm15, %%ymm" #r ", %%ymm" #r "\n"
    R(0) R(1) R(2) R(3) R(4) R(5)
#undef R
    " add $24, %%rax\n add $32, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm5, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A8),[B]"r"(B),[ones]"r"(ones),[st]"r"(st) : "rax","rbx","rcx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}
// int16 with B already widened in memory (as a per-panel int16 copy would give): the
// vpmovsxbw pair per group becomes two plain loads.
__attribute__((target("avx2"),noinline)) void k_wd2w(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqa %%ymm0,%%ymm6\n vmovdqa %%ymm0,%%ymm7\n vmovdqa %%ymm0,%%ymm8\n vmovdqa %%ymm0,%%ymm9\n vmovdqa %%ymm0,%%ymm10\n vmovdqa %%ymm0,%%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    ".p2align 6\n2:\n vmovdqu (%%rbx), %%ymm12\n vmovdqu 32(%%rbx), %%ymm13\n"
#define R(r,x,y) " vpbroadcastq " #r "*8(%%rax), %%ymm14\n vpmaddwd %%ymm12, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm" #x ", %%ymm" #x "\n vpmaddwd %%ymm13, %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm" #y ", %%ymm" #y "\n"
    R(0,0,1) R(1,2,3) R(2,4,5) R(3,6,7) R(4,8,9) R(5,10,11)
#undef R
    " add $48, %%rax\n add $64, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm11, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A16),[B]"r"(B16),[st]"r"(st) : "rax","rbx","rcx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}
// int16, 4 rows x 12 columns, widened B as vpmaddwd's memory operand: 4 broadcasts per
// 12 vpmaddwd instead of 6 (and no vpmovsxbw).
__attribute__((target("avx2"),noinline)) void k_wd4x12(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqa %%ymm0,%%ymm6\n vmovdqa %%ymm0,%%ymm7\n vmovdqa %%ymm0,%%ymm8\n vmovdqa %%ymm0,%%ymm9\n vmovdqa %%ymm0,%%ymm10\n vmovdqa %%ymm0,%%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    "2:\n"
#define R(r,x,y,z) " vpbroadcastq " #r "*8(%%rax), %%ymm14\n vpmaddwd (%%rbx), %%ymm14, %%ymm15\n vpaddd %%ymm15, %%ymm" #x ", %%ymm" #x "\n vpmaddwd 32(%%rbx), %%ymm14, %%ymm13\n vpaddd %%ymm13, %%ymm" #y ", %%ymm" #y "\n vpmaddwd 64(%%rbx), %%ymm14, %%ymm12\n vpaddd %%ymm12, %%ymm" #z ", %%ymm" #z "\n"
    R(0,0,1,2) R(1,3,4,5) R(2,6,7,8) R(3,9,10,11)
#undef R
    " add $32, %%rax\n add $96, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm11, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A16),[B]"r"(B16),[st]"r"(st) : "rax","rbx","rcx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}
// int16 with A stored already broadcast (a row's 4 k repeated over the ymm) as
// vpmaddwd's memory operand and widened B in registers: no broadcast instruction.
__attribute__((target("avx2"),noinline)) void k_wdab(int reps, int32_t* out){
  alignas(32) int32_t st[12*8];
  asm volatile(
    "vpxor %%ymm0,%%ymm0,%%ymm0\n vmovdqa %%ymm0,%%ymm1\n vmovdqa %%ymm0,%%ymm2\n vmovdqa %%ymm0,%%ymm3\n vmovdqa %%ymm0,%%ymm4\n vmovdqa %%ymm0,%%ymm5\n vmovdqa %%ymm0,%%ymm6\n vmovdqa %%ymm0,%%ymm7\n vmovdqa %%ymm0,%%ymm8\n vmovdqa %%ymm0,%%ymm9\n vmovdqa %%ymm0,%%ymm10\n vmovdqa %%ymm0,%%ymm11\n"
    "1:\n mov %[A], %%rax\n mov %[B], %%rbx\n mov $128, %%ecx\n"
    ".p2align 6\n2:\n vmovdqu (%%rbx), %%ymm12\n vmovdqu 32(%%rbx), %%ymm13\n"
#define R(r,x,y) " vpmaddwd " #r "*32(%%rax), %%ymm12, %%ymm15\n vpaddd %%ymm15, %%ymm" #x ", %%ymm" #x "\n vpmaddwd " #r "*32(%%rax), %%ymm13, %%ymm14\n vpaddd %%ymm14, %%ymm" #y ", %%ymm" #y "\n"
    R(0,0,1) R(1,2,3) R(2,4,5) R(3,6,7) R(4,8,9) R(5,10,11)
#undef R
    " add $192, %%rax\n add $64, %%rbx\n dec %%ecx\n jnz 2b\n dec %[reps]\n jnz 1b\n"
    " vmovdqa %%ymm0, (%[st])\n vmovdqa %%ymm1, 32(%[st])\n vmovdqa %%ymm11, 64(%[st])\n vzeroupper\n"
    : [reps]"+r"(reps) : [A]"r"(A16B),[B]"r"(B16),[st]"r"(st) : "rax","rbx","rcx","memory",ACC_CLOB);
  memcpy(out, st, 32);
}
int main(){
  for(int i=0;i<16;i++) ones[i]=1;
  for (int i = 0; i < (int)sizeof(B); i++) B[i] = i * 7;
  for (int i = 0; i < (int)sizeof(A8); i++) {
    A8[i] = i & 127;
    S8[i] = i * 3;
  }
  for (int i = 0; i < (int)(sizeof(A16) / 2); i++) A16[i] = i % 200 - 100;
  for (int i = 0; i < (int)(sizeof(B16) / 2); i++) B16[i] = i % 250 - 125;
  int32_t out[8]; const int reps=20000;
  struct {const char* n; void(*f)(int,int32_t*); double macs;} ks[]={{"int16 vpmaddwd 6x8",k_wd2,6*8*4.0},{"int16 6x8 B widened",k_wd2w,6*8*4.0},{"int16 4x12 B widened",k_wd4x12,4*12*4.0},{"int16 6x8 A broadcast",k_wdab,6*8*4.0},{"vpmaddubsw 12x8",k_ub12b,12*8*4.0},{"vpmaddubsw 6x8",k_ub6x8,6*8*4.0},{"vpmaddubsw 6x16",k_ub6,6*16*4.0},{"sign trick 12x8",k_sg12,12*8*4.0}};
  for(int round=0;round<3;round++) for(auto& k:ks){ double best=1e9; for(int t=0;t<5;t++){double t0=now(); k.f(reps,out); double dt=now()-t0; if(dt<best)best=dt;} printf("%-20s %6.1f GMAC/s\n",k.n,k.macs*G*reps/best*1e-9);}
}
