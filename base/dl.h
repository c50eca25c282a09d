// dl.h: the dynamic loader's last error as one line (libcuda, NVRTC and cuDNN are dlopen'ed).
#pragma once

#include <dlfcn.h>

#include <string>

namespace convt3d {

// dlerror() text with newlines folded, so every reason prints as a single line.
inline std::string DlError() {
  const char* e = dlerror();
  std::string s = e ? e : "unknown dlopen error";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace convt3d
