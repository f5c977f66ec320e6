// SPDX-License-Identifier: Apache-2.0
#include "loom/plugin_path.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace loom {
namespace {

std::string absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof cwd) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

void split_into(const std::string& list, char sep, const std::string& origin, std::vector<PluginDir>* out) {
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, sep)) {
    if (!item.empty()) out->push_back({absolute(item), origin});
  }
}

}  // namespace

std::string default_plugin_dir() {
  // Where this very library lives: the build tree's lib/ or the installed libdir.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&default_plugin_dir), &info) == 0 || info.dli_fname == nullptr) return {};
  char resolved[PATH_MAX];
  std::string self = realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  return parent_dir(self) + "/plugins";
}

std::vector<PluginDir> plugin_search_path(const std::vector<std::string>& cli_paths,
                                          const std::vector<std::string>& config_paths) {
  std::vector<PluginDir> dirs;
  for (const auto& p : cli_paths) split_into(p, ':', "--plugin-path", &dirs);
  for (const auto& p : config_paths) dirs.push_back({absolute(p), "config [plugins] path"});
  // Like the Vulkan loader, ignore the environment in setuid processes.
  if (const char* env = std::getenv("LOOM_PLUGIN_PATH"); env != nullptr && getuid() == geteuid()) {
    split_into(env, ':', "LOOM_PLUGIN_PATH", &dirs);
  }
  if (auto def = default_plugin_dir(); !def.empty()) dirs.push_back({def, "libloom"});
  // The same folder twice would list every plugin in it as shadowing itself.
  std::vector<PluginDir> unique;
  std::vector<std::string> seen;
  for (auto& d : dirs) {
    char resolved[PATH_MAX];
    std::string key = realpath(d.path.c_str(), resolved) ? resolved : d.path;
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    unique.push_back(std::move(d));
  }
  return unique;
}

bool parse_plugin_file_name(const std::string& file_name, std::string* name, loom_kind* kind) {
  static const std::pair<const char*, loom_kind> kSuffixes[] = {{"_collective.so", LOOM_KIND_COLLECTIVE},
                                                                {"_strategy.so", LOOM_KIND_STRATEGY}};
  if (file_name.rfind("lib", 0) != 0) return false;
  for (const auto& [suffix, k] : kSuffixes) {
    std::string s = suffix;
    if (file_name.size() > 3 + s.size() && file_name.compare(file_name.size() - s.size(), s.size(), s) == 0) {
      *name = file_name.substr(3, file_name.size() - 3 - s.size());
      *kind = k;
      return true;
    }
  }
  return false;
}

std::string near_miss_plugin_file_name(const std::string& file_name) {
  const std::string so = ".so";
  if (file_name.rfind("lib", 0) != 0 || file_name.size() <= 3 + so.size() ||
      file_name.compare(file_name.size() - so.size(), so.size(), so) != 0) {
    return {};
  }
  std::string name;
  loom_kind kind = 0;
  if (parse_plugin_file_name(file_name, &name, &kind)) return {};
  const std::string stem = file_name.substr(3, file_name.size() - 3 - so.size());
  const auto underscore = stem.rfind('_');
  if (underscore == std::string::npos) return {};  // libfoo.so: a library, not a plugin
  const std::string word = stem.substr(underscore + 1);
  const std::string rule = "valid kinds: collective, strategy; plugin files are named lib<name>_<kind>.so";
  if (underscore == 0) return file_name + ": it has no plugin name before '_" + word + "' (" + rule + ")";
  return file_name + ": it looks like a plugin, but '" + word + "' is not a plugin kind (" + rule + ")";
}

std::vector<PluginCandidate> find_plugin_files(const std::vector<PluginDir>& dirs, std::vector<std::string>* warnings) {
  std::vector<PluginCandidate> found;
  for (const auto& dir : dirs) {
    DIR* handle = opendir(dir.path.c_str());
    if (handle == nullptr) continue;  // a missing folder in a path list is normal
    std::vector<PluginCandidate> here;
    std::vector<std::string> misses;
    while (dirent* entry = readdir(handle)) {
      PluginCandidate c;
      const bool named = parse_plugin_file_name(entry->d_name, &c.name, &c.kind);
      const std::string near_miss = named ? std::string() : near_miss_plugin_file_name(entry->d_name);
      if (!named && near_miss.empty()) continue;
      c.path = dir.path + "/" + entry->d_name;
      struct stat st {};
      if (stat(c.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (!named) {  // a misspelt kind would otherwise vanish without a word
        misses.push_back("plugin folder " + dir.path + ": skipping " + near_miss);
        continue;
      }
      c.origin = dir.origin;
      here.push_back(std::move(c));
    }
    closedir(handle);
    std::sort(here.begin(), here.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
    found.insert(found.end(), here.begin(), here.end());
    std::sort(misses.begin(), misses.end());
    if (warnings != nullptr) warnings->insert(warnings->end(), misses.begin(), misses.end());
  }
  return found;
}

std::vector<std::string> plugin_file_warnings(const std::string& path) {
  std::vector<std::string> warnings;
  auto mode_text = [](mode_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
    return std::string(text);
  };
  // As sudo checks its plugins and OpenSSH (StrictModes) its keys: whoever can write the folder or the file
  // decides what code loom runs. The sticky bit does not help: it stops
  // renaming others' files, not adding a new plugin or shadowing one.
  const std::string dir = parent_dir(path);
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0 && (st.st_mode & S_IWOTH)) {
    warnings.push_back("plugin folder " + dir + " is world-writable (mode " + mode_text(st.st_mode) +
                       (st.st_mode & S_ISVTX ? ", sticky" : "") +
                       "): any user can put a plugin there that loom would load; make it writable by its owner "
                       "only (chmod o-w " + dir + ")");
  }
  if (stat(path.c_str(), &st) != 0) return warnings;
  if (st.st_mode & S_IWOTH) {
    warnings.push_back("plugin file " + path + " is world-writable (mode " + mode_text(st.st_mode) +
                       "): any user can change the code loom runs; chmod o-w " + path);
  }
  const uid_t me = geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    warnings.push_back("plugin file " + path + " is owned by uid " + std::to_string(st.st_uid) +
                       ", neither this user (uid " + std::to_string(me) +
                       ") nor root: its owner can change the code loom runs; a plugin should be owned by root or "
                       "by the user running loom");
  }
  return warnings;
}

}  // namespace loom
