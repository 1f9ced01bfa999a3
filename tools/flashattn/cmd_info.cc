// flashattn info: the version, the CUDA devices and the backends built in.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli_args.h"
#include "commands.h"
#include "cuda/common/runtime.h"

namespace flashattn::cli {

int cmd_info(const Args& args) {
  ArgParser parser("flashattn info", "",
                   "Show the version, the CUDA devices (name, compute capability, SMs, memory)\n"
                   "and every backend built in, with whether it is usable here and why not.");
  parser.section("Flags");
  if (!parser.parse(args)) return kExitOk;

#ifdef FLASHATTN_HAVE_CUDA_KERNELS
  constexpr const char* kKernels = "built";
#else
  constexpr const char* kKernels = "not built (configured with -DFLASHATTN_BUILD_CUDA_KERNELS=OFF)";
#endif
  std::ostringstream os;
  os << "flashattn " << kVersion << "\n";
  os << "GPU kernels: " << kKernels << "\n";

  const int count = cuda::device_count();
  if (count == 0) {
    std::string reason = cuda::unavailable_reason();
    if (reason.empty()) reason = "no CUDA device";
    os << "CUDA devices: none; " << reason << "\n";
  } else {
    os << "CUDA devices: " << count << "\n";
    for (int i = 0; i < count; ++i) {
      cuda::DeviceProps props;
      Status st = cuda::device_props(i, &props);
      if (!st.ok()) {
        os << "  cuda:" << i << "  (properties unavailable: " << st.to_string() << ")\n";
        continue;
      }
      os << "  cuda:" << i << "  " << props.name << ", compute capability " << props.major << "."
         << props.minor << ", " << props.sm_count << " SMs, "
         << cuda::format_bytes(props.total_memory) << " memory\n";
    }
  }

  const std::vector<BackendInfo> backends = list_backends();
  std::size_t width = 0;
  for (const BackendInfo& b : backends) width = std::max(width, b.name.size());
  os << "Backends:\n";
  for (const BackendInfo& b : backends) {
    os << "  " << std::left << std::setw(static_cast<int>(width)) << b.name << "  " << std::setw(4)
       << (b.device_type == DeviceType::kCUDA ? "cuda" : "cpu") << "  " << std::setw(8)
       << (b.usable ? "usable" : "unusable") << "  " << b.description << "\n";
    if (!b.usable) {
      os << "  " << std::string(width, ' ') << "  why not: " << b.why_not << "\n";
    }
  }
  std::cout << os.str();
  return kExitOk;
}

}  // namespace flashattn::cli
