#include "shm/kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "reduce/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ddp::detail::shm {
namespace {

// Elements per block: the accumulator and one widened source stay in L1.
constexpr std::size_t kBlock = 1024;

template <typename A>
struct Sum {
  A operator()(A x, A y) const { return static_cast<A>(x + y); }
};
template <typename A>
struct Product {
  A operator()(A x, A y) const { return static_cast<A>(x * y); }
};
template <typename A>
struct Min {
  A operator()(A x, A y) const { return y < x ? y : x; }  // std::min(x, y)
};
template <typename A>
struct Max {
  A operator()(A x, A y) const { return x < y ? y : x; }  // std::max(x, y)
};
template <typename A>
struct And {
  A operator()(A x, A y) const { return static_cast<A>(x & y); }
};
template <typename A>
struct Or {
  A operator()(A x, A y) const { return static_cast<A>(x | y); }
};
template <typename A>
struct Xor {
  A operator()(A x, A y) const { return static_cast<A>(x ^ y); }
};

// The next loop's iterations are independent: the compiler may vectorize it without the overlap
// test that would send in-place calls down its scalar path.
#if defined(__clang__)
#define DDP_INDEPENDENT_ITERATIONS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define DDP_INDEPENDENT_ITERATIONS _Pragma("GCC ivdep")
#else
#define DDP_INDEPENDENT_ITERATIONS
#endif

// out[i] = f(a[i], b[i]), also into out2 when given. `out` may be `a` or `b` itself (in place),
// never a shifted copy, so no iteration depends on another.
template <typename A, typename F>
void combine(A* out, A* out2, const A* a, const A* b, std::size_t m, F f) {
  if (out2) {
    DDP_INDEPENDENT_ITERATIONS
    for (std::size_t i = 0; i < m; ++i) out2[i] = out[i] = f(a[i], b[i]);
  } else {
    DDP_INDEPENDENT_ITERATIONS
    for (std::size_t i = 0; i < m; ++i) out[i] = f(a[i], b[i]);
  }
}

// The op, followed by AVG's division by the number of sources (integers truncate toward zero).
template <typename A, typename F>
struct ThenDivide {
  F f;
  int n;  // not an A: 200 ranks do not fit an int8
  A operator()(A x, A y) const {
    if constexpr (std::is_floating_point_v<A>) return f(x, y) / static_cast<A>(n);
    else return static_cast<A>(static_cast<std::int64_t>(f(x, y)) / n);
  }
};

// The op, followed by a multiplication by 1 / n where n is a power of two: the same result as the
// division (1 / n is exact), at a multiplication's cost.
template <typename A, typename F>
struct ThenScale {
  F f;
  A scale;
  A operator()(A x, A y) const { return f(x, y) * scale; }
};

// The last fold of a reduction: with `avg`, followed by the division by the `n` sources.
template <typename A, typename F>
void combine_last(A* out, A* out2, const A* a, const A* b, std::size_t m, F f, bool avg, int n) {
  if constexpr (std::is_floating_point_v<A>) {
    if (avg && (n & (n - 1)) == 0) return combine(out, out2, a, b, m, ThenScale<A, F>{f, A(1) / static_cast<A>(n)});
  }
  if (avg) combine(out, out2, a, b, m, ThenDivide<A, F>{f, n});
  else combine(out, out2, a, b, m, f);
}

// ---- 16-bit floats <-> float32, a block at a time ----

void widen_bf16(const std::uint16_t* __restrict in, float* __restrict out, std::size_t m) {
  for (std::size_t i = 0; i < m; ++i) {
    std::uint32_t bits = std::uint32_t{in[i]} << 16;
    std::memcpy(&out[i], &bits, 4);
  }
}

void narrow_bf16(const float* __restrict in, std::uint16_t* __restrict out, std::size_t m) {
  for (std::size_t i = 0; i < m; ++i) {  // reduce/half.h's float_to_bf16, branch-free so it vectorizes
    std::uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const std::uint32_t nan = (bits >> 16) | 0x40u;
    out[i] = static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

void widen_fp16_soft(const std::uint16_t* in, float* out, std::size_t m) {
  for (std::size_t i = 0; i < m; ++i) out[i] = fp16_to_float(in[i]);
}

void narrow_fp16_soft(const float* in, std::uint16_t* out, std::size_t m) {
  for (std::size_t i = 0; i < m; ++i) out[i] = float_to_fp16(in[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void widen_fp16_f16c(const std::uint16_t* in, float* out, std::size_t m) {
  std::size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  widen_fp16_soft(in + i, out + i, m - i);
}

__attribute__((target("avx,f16c"))) void narrow_fp16_f16c(const float* in, std::uint16_t* out, std::size_t m) {
  std::size_t i = 0;
  for (; i + 8 <= m; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  narrow_fp16_soft(in + i, out + i, m - i);
}

// CPUID leaf 1: F16C (ecx bit 29) and AVX (bit 28) with the OS saving the AVX state (OSXSAVE, bit
// 27, and XCR0's SSE and AVX bits). GCC's __builtin_cpu_supports("f16c") would do, but clang's
// does not know "f16c".
bool has_f16c() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  constexpr unsigned kF16c = 1u << 29, kAvx = 1u << 28, kOsxsave = 1u << 27;
  if ((ecx & (kF16c | kAvx | kOsxsave)) != (kF16c | kAvx | kOsxsave)) return false;
  unsigned xcr0_low, xcr0_high;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return (xcr0_low & 6u) == 6u;
}

const bool kHasF16c = has_f16c();
#endif

void widen_fp16(const std::uint16_t* in, float* out, std::size_t m) {
#if defined(__x86_64__)
  if (kHasF16c) return widen_fp16_f16c(in, out, m);
#endif
  widen_fp16_soft(in, out, m);
}

void narrow_fp16(const float* in, std::uint16_t* out, std::size_t m) {
#if defined(__x86_64__)
  if (kHasF16c) return narrow_fp16_f16c(in, out, m);
#endif
  narrow_fp16_soft(in, out, m);
}

// ---- the kernels ----

// Elements [start, start + m) of srcs[0..n) folded in order, the last fold writing straight into
// the destinations (and dividing, for AVG); with more than two sources the partial results stay
// in an L1-sized accumulator.
template <typename A, template <typename> class Op>
void fold_block(A* dst, A* dst2, const void* const* srcs, int n, std::size_t start, std::size_t m, bool avg, A* acc) {
  auto src = [&](int k) { return static_cast<const A*>(srcs[k]) + start; };
  if (n == 1) return combine(dst, dst2, src(0), src(0), m, [](A x, A) { return x; });  // x / 1 is x
  const A* left = src(0);
  for (int k = 1; k + 1 < n; ++k) {
    combine(acc, static_cast<A*>(nullptr), left, src(k), m, Op<A>{});
    left = acc;
  }
  combine_last(dst, dst2, left, src(n - 1), m, Op<A>{}, avg, n);
}

template <typename T, template <typename> class Op>
void reduce_plain(void* dst, void* dst2, const void* const* srcs, int n, std::size_t count, bool avg) {
  alignas(64) T acc[kBlock];
  if (!dst) std::swap(dst, dst2);
  for (std::size_t start = 0; start < count; start += kBlock) {
    fold_block<T, Op>(static_cast<T*>(dst) + start, dst2 ? static_cast<T*>(dst2) + start : nullptr, srcs, n, start,
                      std::min(kBlock, count - start), avg, acc);
  }
}

template <void (*Widen)(const std::uint16_t*, float*, std::size_t),
          void (*Narrow)(const float*, std::uint16_t*, std::size_t), template <typename> class Op>
void reduce_half(void* dst, void* dst2, const void* const* srcs, int n, std::size_t count, bool avg) {
  alignas(64) float acc[kBlock];
  alignas(64) float wide[kBlock];
  alignas(64) std::uint16_t out[kBlock];
  for (std::size_t start = 0; start < count; start += kBlock) {
    const std::size_t m = std::min(kBlock, count - start);
    Widen(static_cast<const std::uint16_t*>(srcs[0]) + start, acc, m);
    for (int k = 1; k < n; ++k) {  // one source: its own average
      Widen(static_cast<const std::uint16_t*>(srcs[k]) + start, wide, m);
      combine_last(acc, static_cast<float*>(nullptr), acc, wide, m, Op<float>{}, avg && k + 1 == n, n);
    }
    Narrow(acc, out, m);
    if (dst) std::memcpy(static_cast<std::uint16_t*>(dst) + start, out, m * 2);
    if (dst2) std::memcpy(static_cast<std::uint16_t*>(dst2) + start, out, m * 2);
  }
}

using Kernel = void (*)(void*, void*, const void* const*, int, std::size_t, bool);

template <typename T>
Kernel pick_plain(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return reduce_plain<T, Sum>;
    case ReduceOp::PRODUCT: return reduce_plain<T, Product>;
    case ReduceOp::MIN: return reduce_plain<T, Min>;
    case ReduceOp::MAX: return reduce_plain<T, Max>;
    case ReduceOp::BAND:
      if constexpr (std::is_integral_v<T>) return reduce_plain<T, And>;
      break;
    case ReduceOp::BOR:
      if constexpr (std::is_integral_v<T>) return reduce_plain<T, Or>;
      break;
    case ReduceOp::BXOR:
      if constexpr (std::is_integral_v<T>) return reduce_plain<T, Xor>;
      break;
  }
  return nullptr;
}

template <void (*Widen)(const std::uint16_t*, float*, std::size_t),
          void (*Narrow)(const float*, std::uint16_t*, std::size_t)>
Kernel pick_half(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return reduce_half<Widen, Narrow, Sum>;
    case ReduceOp::PRODUCT: return reduce_half<Widen, Narrow, Product>;
    case ReduceOp::MIN: return reduce_half<Widen, Narrow, Min>;
    case ReduceOp::MAX: return reduce_half<Widen, Narrow, Max>;
    default: return nullptr;
  }
}

Kernel pick(DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::Float32: return pick_plain<float>(op);
    case DataType::Float64: return pick_plain<double>(op);
    case DataType::Float16: return pick_half<widen_fp16, narrow_fp16>(op);
    case DataType::BFloat16: return pick_half<widen_bf16, narrow_bf16>(op);
    case DataType::Int8: return pick_plain<std::int8_t>(op);
    case DataType::UInt8: return pick_plain<std::uint8_t>(op);
    case DataType::Int32: return pick_plain<std::int32_t>(op);
    case DataType::Int64: return pick_plain<std::int64_t>(op);
  }
  return nullptr;
}

}  // namespace

void reduce(void* dst, void* dst2, const void* const* srcs, int n, std::size_t count, DataType dtype, ReduceOp op) {
  if (Kernel k = pick(dtype, op)) k(dst, dst2, srcs, n, count, op == ReduceOp::AVG);
}

}  // namespace ddp::detail::shm
