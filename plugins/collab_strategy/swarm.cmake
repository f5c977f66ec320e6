# SPDX-License-Identifier: Apache-2.0
# loom_collab_swarm: the collab strategy's building blocks (wire records, the
# OpenDHT node, state transfer) as a static, position-independent library, so
# the plugin and the unit tests link the same code. Included by this folder's
# CMakeLists.txt.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENDHT REQUIRED IMPORTED_TARGET opendht)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
# AES-256-GCM for a keyed state's chunks (state_secret.h); OpenDHT brings GnuTLS already.
pkg_check_modules(GNUTLS REQUIRED IMPORTED_TARGET gnutls)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json REQUIRED)

set(_loom_swarm_dir ${CMAKE_CURRENT_LIST_DIR})
set(_loom_swarm_sources ${_loom_swarm_dir}/records.cpp ${_loom_swarm_dir}/records_frame.cpp ${_loom_swarm_dir}/record_keys.cpp ${_loom_swarm_dir}/group_split.cpp ${_loom_swarm_dir}/dht.cpp ${_loom_swarm_dir}/dht_put.cpp ${_loom_swarm_dir}/dht_watch.cpp ${_loom_swarm_dir}/udp_buffer.cpp ${_loom_swarm_dir}/dht_value.cpp ${_loom_swarm_dir}/tracker.cpp ${_loom_swarm_dir}/progress_shards.cpp ${_loom_swarm_dir}/progress_exchange.cpp ${_loom_swarm_dir}/progress_push.cpp ${_loom_swarm_dir}/oob_hub.cpp ${_loom_swarm_dir}/top_up_grants.cpp ${_loom_swarm_dir}/group_comm.cpp
    ${_loom_swarm_dir}/fingerprint.cpp ${_loom_swarm_dir}/health.cpp
    ${_loom_swarm_dir}/state_wire.cpp ${_loom_swarm_dir}/state_server.cpp ${_loom_swarm_dir}/state_admit.cpp ${_loom_swarm_dir}/state_serve.cpp ${_loom_swarm_dir}/state_server_auth.cpp ${_loom_swarm_dir}/state_secret.cpp ${_loom_swarm_dir}/serve_guard.cpp
    ${_loom_swarm_dir}/state_download.cpp ${_loom_swarm_dir}/state_download_race.cpp ${_loom_swarm_dir}/state_download_stripes.cpp ${_loom_swarm_dir}/relay_channel.cpp ${_loom_swarm_dir}/relay_serve.cpp ${_loom_swarm_dir}/relay_link.cpp ${_loom_swarm_dir}/dial_back.cpp ${_loom_swarm_dir}/seal.cpp ${_loom_swarm_dir}/identity.cpp ${_loom_swarm_dir}/robust.cpp ${_loom_swarm_dir}/compression.cpp ${_loom_swarm_dir}/outer_step.cpp ${_loom_swarm_dir}/bandwidth.cpp ${_loom_swarm_dir}/state_check.cpp ${_loom_swarm_dir}/observer.cpp ${_loom_swarm_dir}/verified_progress.cpp)

add_library(loom_collab_swarm STATIC ${_loom_swarm_sources})
set_target_properties(loom_collab_swarm PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_STANDARD 17
                      CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                      CXX_STANDARD_REQUIRED ON)
target_include_directories(loom_collab_swarm PUBLIC ${_loom_swarm_dir})
target_compile_options(loom_collab_swarm PRIVATE -Wall -Wextra)
# OpenDHT, libsodium and GnuTLS stay PRIVATE to the sources, but a static library's consumers must
# still link it: CMake carries PRIVATE link dependencies of static libraries.
target_link_libraries(loom_collab_swarm PRIVATE PkgConfig::OPENDHT PkgConfig::SODIUM PkgConfig::GNUTLS nlohmann_json::nlohmann_json PUBLIC ZLIB::ZLIB Threads::Threads loom_sdk)
