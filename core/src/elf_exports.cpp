// SPDX-License-Identifier: Apache-2.0
#include "elf_exports.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace loom {
namespace {

// An open file whose every read is checked against its size: a corrupt
// offset or length fails the read instead of reaching past the end.
class BoundedFile {
 public:
  explicit BoundedFile(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    struct stat st {};
    if (fd_ >= 0 && fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
  }
  ~BoundedFile() {
    if (fd_ >= 0) close(fd_);
  }
  BoundedFile(const BoundedFile&) = delete;
  BoundedFile& operator=(const BoundedFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  bool read(uint64_t offset, uint64_t length, void* out) const {
    if (offset > size_ || length > size_ - offset) return false;
    auto* bytes = static_cast<char*>(out);
    for (uint64_t done = 0; done < length;) {
      ssize_t n = pread(fd_, bytes + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<uint64_t>(n);
    }
    return true;
  }
  bool read(uint64_t offset, uint64_t length, std::string* out) const {
    if (offset > size_ || length > size_ - offset) return false;
    out->resize(length);
    return read(offset, length, out->data());
  }

 private:
  int fd_;
  uint64_t size_ = 0;
};

// Callers keep index below 2^24, so index * e_shentsize cannot overflow.
bool read_section_header(const BoundedFile& file, const Elf64_Ehdr& eh, uint64_t index, Elf64_Shdr* out) {
  const uint64_t at = index * eh.e_shentsize;
  return eh.e_shoff <= UINT64_MAX - at && file.read(eh.e_shoff + at, sizeof *out, out);
}

// No real .dynsym or .dynstr comes near this; a corrupt size would only make
// the reader allocate the file's size.
constexpr uint64_t kMaxTableBytes = uint64_t{256} << 20;

}  // namespace

bool elf_exported_symbols(const std::string& path, std::vector<std::string>* symbols, std::string* error) {
  symbols->clear();
  BoundedFile file(path);
  if (!file.is_open()) return *error = std::string("cannot open: ") + std::strerror(errno), false;
  Elf64_Ehdr eh{};
  if (!file.read(0, sizeof eh, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return *error = "not an ELF file", false;
  }
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const unsigned char native = ELFDATA2LSB;
#else
  const unsigned char native = ELFDATA2MSB;
#endif
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != native) {
    return *error = "not a 64-bit ELF file of this machine's byte order", false;
  }
  if (eh.e_shoff == 0 || eh.e_shentsize < sizeof(Elf64_Shdr)) return *error = "no section headers", false;
  // More than 0xff00 sections: the count is in section 0's sh_size.
  uint64_t count = eh.e_shnum;
  Elf64_Shdr first{};
  if (count == 0) {
    if (!read_section_header(file, eh, 0, &first)) return *error = "section headers lie outside the file", false;
    count = first.sh_size;
  }
  // Caps the loop below; each header must also lie inside the file.
  if (count > (uint64_t{1} << 24)) return *error = "implausible section count " + std::to_string(count), false;
  Elf64_Shdr dynsym{}, strtab{};
  bool found = false;
  for (uint64_t i = 0; i < count && !found; ++i) {
    Elf64_Shdr sh{};
    if (!read_section_header(file, eh, i, &sh)) return *error = "section headers lie outside the file", false;
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_link >= count || !read_section_header(file, eh, sh.sh_link, &strtab) || strtab.sh_type != SHT_STRTAB) {
      return *error = ".dynsym links to no string table", false;
    }
    dynsym = sh;
    found = true;
  }
  if (!found) return true;  // nothing exported at all
  if (dynsym.sh_entsize < sizeof(Elf64_Sym)) return *error = ".dynsym entry size is too small", false;
  if (dynsym.sh_size > kMaxTableBytes || strtab.sh_size > kMaxTableBytes) {
    return *error = ".dynsym or its string table is implausibly large", false;
  }
  std::string table, names;
  if (!file.read(dynsym.sh_offset, dynsym.sh_size, &table) || !file.read(strtab.sh_offset, strtab.sh_size, &names)) {
    return *error = ".dynsym or its string table lies outside the file", false;
  }
  const uint64_t entries = dynsym.sh_size / dynsym.sh_entsize;
  for (uint64_t i = 1; i < entries; ++i) {  // entry 0 is the reserved null symbol
    Elf64_Sym sym{};
    std::memcpy(&sym, table.data() + i * dynsym.sh_entsize, sizeof sym);
    const unsigned bind = ELF64_ST_BIND(sym.st_info);
    if ((bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) || sym.st_shndx == SHN_UNDEF) continue;
    const unsigned visibility = ELF64_ST_VISIBILITY(sym.st_other);
    if (visibility == STV_HIDDEN || visibility == STV_INTERNAL) continue;
    // A version script's named node (VERS_1.0 { ... }) is an absolute zero
    // object of that name: a version, not something the code exports.
    if (sym.st_shndx == SHN_ABS && sym.st_value == 0 && ELF64_ST_TYPE(sym.st_info) == STT_OBJECT) continue;
    if (sym.st_name == 0 || sym.st_name >= names.size()) continue;
    const char* name = names.data() + sym.st_name;
    symbols->emplace_back(name, strnlen(name, names.size() - sym.st_name));
  }
  return true;
}

std::vector<std::string> extra_plugin_exports(const std::string& path) {
  static const char* const kExpected[] = {"loom_collective_plugin_v1", "loom_strategy_plugin_v1",
                                          // What GNU ld defines in a shared object linked without a version script.
                                          "_init", "_fini", "_edata", "_end", "__bss_start"};
  std::vector<std::string> symbols, extra;
  std::string error;
  if (!elf_exported_symbols(path, &symbols, &error)) return extra;
  for (auto& s : symbols) {
    if (std::find(std::begin(kExpected), std::end(kExpected), s) == std::end(kExpected)) extra.push_back(std::move(s));
  }
  return extra;
}

}  // namespace loom
