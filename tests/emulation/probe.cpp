// Runs single AMD instructions through the host emulation, for the atom tests: one wave per case, each
// lane's operands read from stdin as raw bytes, each lane's results written to stdout. Built by
// tests/emulation/probe.py against a generated tree, with that arch's emulation header included first.
//
//   probe <instruction> <cases>     stdin: cases x lanes x In, stdout: cases x lanes x Out
//
// The instructions are the emulation's own (the structs the helpers' host definitions execute), so
// the tests hold exactly what the bodies run to the layouts AMD documents.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(MXLOGITS_EMULATE_GFX950)
#include "gfx950/atom.h"
#include "gfx950/memory.h"
#include "gfx950/xlane.h"
namespace arch = mxlogits::gfx950;
#elif defined(MXLOGITS_EMULATE_GFX1250)
#include "gfx1250/atom.h"
#include "gfx1250/tdm.h"
#include "gfx1250/xlane.h"
namespace arch = mxlogits::gfx1250;
#endif

namespace emu = mxlogits::emu;

namespace {

std::vector<char> read_all() {
  std::vector<char> data;
  char chunk[1 << 16];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, stdin)) > 0;) data.insert(data.end(), chunk, chunk + n);
  return data;
}

void run_cta(unsigned threads, const std::function<void()>& body) {
  emu::Stream stream{1};
  if (emu::launch(emu::kTarget, 1, threads, 0, &stream, body) != 0) {
    std::fprintf(stderr, "%s\n", emu::last_error.c_str());
    std::exit(2);
  }
}

// Each case: every lane of one wave executes Op on its own In.
template <class Op>
void wave_cases(long cases) {
  const int lanes = emu::kTarget.wave;
  const std::vector<char> data = read_all();
  if (data.size() != size_t(cases) * lanes * sizeof(typename Op::In)) {
    std::fprintf(stderr, "probe: expected %zu bytes of input, found %zu\n",
                 size_t(cases) * lanes * sizeof(typename Op::In), data.size());
    std::exit(2);
  }
  const auto* in = reinterpret_cast<const typename Op::In*>(data.data());
  std::vector<typename Op::Out> out(size_t(cases) * lanes);
  for (long c = 0; c < cases; ++c) {
    run_cta(unsigned(lanes), [&] {
      const size_t i = size_t(c) * lanes + size_t(emu::lane());
      out[i] = emu::wave_op<Op>(in[i]);
    });
  }
  std::fwrite(out.data(), sizeof(typename Op::Out), out.size(), stdout);
}

#if defined(MXLOGITS_EMULATE_GFX1250)
// One tensor copy into a fresh CTA's LDS (filled with 0xFF) from `global`, then the wait; stdout: the
// first `lds_bytes` of LDS. stdin: the descriptor with a zero global address and LDS address
// (relative to the CTA's LDS and to the global bytes that follow), then the global bytes.
void tensor_copy(long lds_bytes) {
  std::vector<char> data = read_all();
  arch::tdm::Descriptor d;
  std::memcpy(&d, data.data(), sizeof d);
  const char* global = data.data() + sizeof d;
  std::vector<char> out(static_cast<size_t>(lds_bytes));
  run_cta(unsigned(emu::kTarget.wave), [&] {
    auto& lds = emu::lds_static<char[65536], struct probe_lds_site>();
    arch::tdm::Descriptor mine = d;
    const uint64_t src = reinterpret_cast<uintptr_t>(global) + (uint64_t(mine.g0[2]) | uint64_t(mine.g0[3] & 0x1ffffffu) << 32);
    mine.g0[1] += uint32_t(emu::cta().lds_address(lds));
    mine.g0[2] = uint32_t(src);
    mine.g0[3] = (mine.g0[3] & ~0x1ffffffu) | uint32_t(src >> 32);
    emu::wave_op<arch::tdm::TensorLoadToLds>(mine);
    arch::tdm::wait();
    if (emu::lane() == 0) std::memcpy(out.data(), lds, out.size());
  });
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// The descriptor the body's tdm::describe<Pad> writes for (lds, global, rows, dwords) from stdin (u32,
// u64, u32, u32); stdout: its 12 dwords.
void describe(long pad) {
  const std::vector<char> data = read_all();
  uint32_t lds, rows, dwords;
  uint64_t global;
  std::memcpy(&lds, data.data(), 4);
  std::memcpy(&global, data.data() + 4, 8);
  std::memcpy(&rows, data.data() + 12, 4);
  std::memcpy(&dwords, data.data() + 16, 4);
  const arch::tdm::Descriptor d = pad ? arch::tdm::describe<true>(lds, global, rows, dwords)
                                      : arch::tdm::describe<false>(lds, global, rows, dwords);
  std::fwrite(&d, sizeof d, 1, stdout);
}
#endif

// The execution model's own rules, case by case (stdout or the launch's error on stderr): 0, half the
// wave at one wave operation and half at another; 1, lane 0 gone while the rest wait at one; 2, a
// scalar operand that differs between lanes; 3, a static LDS object larger than the CTA's LDS; 4, two
// waves exchanging values through LDS across the barrier (stdout: what each thread read).
void model_case(long which) {
  const unsigned threads = 2u * unsigned(emu::kTarget.wave);
  std::vector<int32_t> read(threads);
  run_cta(threads, [&] {
    const int lane = emu::lane();
    switch (which) {
      case 0:
        if (lane < emu::kTarget.wave / 2) {
          emu::amdgcn::readfirstlane(lane);
        } else {
          emu::amdgcn::readlane(lane, 0);
        }
        break;
      case 1:
        if (lane != 0) emu::amdgcn::readfirstlane(lane);
        break;
      case 2:
        emu::amdgcn::readlane(lane, lane);
        break;
      case 3: {
        using Huge = char[1 << 20];
        emu::lds_static<Huge, struct probe_huge_site>()[0] = 1;
        break;
      }
      case 4: {
        using Slots = int32_t[2048];
        auto& slots = emu::lds_static<Slots, struct probe_slots_site>();
        const unsigned t = threadIdx.x;
        slots[t] = int32_t(1000 + t);
        __syncthreads();
        read[t] = slots[(t + emu::kTarget.wave) % threads];  // the other wave's
        break;
      }
    }
  });
  std::fwrite(read.data(), sizeof(int32_t), read.size(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: probe <instruction> <cases>\n");
    return 2;
  }
  const std::string op = argv[1];
  const long n = std::atol(argv[2]);
#if defined(MXLOGITS_EMULATE_GFX950)
  if (op == "mfma") return wave_cases<arch::atom::MfmaScale32x32x64>(n), 0;
  if (op == "permlane32_swap") return wave_cases<arch::xlane::Permlane32Swap>(n), 0;
#elif defined(MXLOGITS_EMULATE_GFX1250)
  if (op == "wmma") return wave_cases<arch::atom::WmmaScale32x16x128F4>(n), 0;
  if (op == "permlane16_swap") return wave_cases<arch::xlane::Permlane16Swap>(n), 0;
  if (op == "tensor_copy") return tensor_copy(n), 0;
  if (op == "describe") return describe(n), 0;
#endif
  if (op == "model") return model_case(n), 0;
  if (op == "readlane") return wave_cases<emu::amdgcn::ReadLane>(n), 0;
  if (op == "readfirstlane") return wave_cases<emu::amdgcn::ReadFirstLane>(n), 0;
  std::fprintf(stderr, "probe: no instruction %s\n", op.c_str());
  return 2;
}
