// SPDX-License-Identifier: Apache-2.0
// The dynamic symbols a shared object exports, read from its ELF .dynsym
// without loading it. Internal to libloom: the loader warns about a plugin
// that exports more than its entry point(s).
#pragma once

#include <string>
#include <vector>

namespace loom {

// Names of the defined GLOBAL and WEAK symbols in the .dynsym of the 64-bit
// ELF file at path, in table order. False (with *error saying why) for a file
// that cannot be read or is not such an ELF file; never crashes on a
// truncated or corrupt one.
bool elf_exported_symbols(const std::string& path, std::vector<std::string>* symbols, std::string* error);

// What a plugin file exports besides the entry symbols and what the linker
// adds to every shared object (_init, _fini, _edata, _end, __bss_start).
// Empty when the file cannot be read: the loader has reported that already.
std::vector<std::string> extra_plugin_exports(const std::string& path);

}  // namespace loom
