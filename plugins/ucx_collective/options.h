/* SPDX-License-Identifier: Apache-2.0 */
// The options the plugin declares (loom plugins info ucx lists them); the
// host hands their values to init through get_option. The thresholds' and
// chunk size's defaults were measured with bench/ucx_tune.sh (2 ranks, the
// 2-core development machine, shared memory): recursive doubling beats the
// ring up to 4 KiB (2.0 vs 3.3 us at 1 KiB), ties at 4 KiB and loses from
// 8 KiB on (7 vs 5.5 us), where its staged message turns rendezvous; the
// staged broadcast and the pipelined one cross between 8 and 16 KiB; 256 KiB
// chunks, 4 deep, gave the best 4-64 MiB allreduces (3.8-3.9 GB/s busbw at
// 64 MiB against 3.2-3.6 for 512 KiB-1 MiB chunks and 3.6-3.8 for 128 KiB).
// Those were measured before the cross-memory-attach path; its threshold
// (64 KiB, where one 8-byte round trip costs about as much as copying the
// message once more) is not tuned yet: the machine was too loaded to say.
// cma_only_oversubscribed: at load 1.5-1.9, 64 MiB allreduces gave, with
// 2 ranks each on its own core, 4.36-4.53 GB/s busbw through UCX's shared
// memory against 3.3-3.7 by cross-memory attach (3.85 with whole blocks),
// and shared memory won at every size from 128 KiB; with 4 ranks on the 2
// cores (43 MB), cross-memory attach won, 1.15-1.20 against 0.74-0.89 GB/s:
// one copy fewer matters once cores are shared, two copiers in parallel
// matter while they are not.
// cma_whole_blocks (ring_pipeline.cpp) is off by default: on this machine,
// loaded 3-7 by other work, 2-rank 64 MiB allreduces with it and without it
// measured alike (1.2-1.7 GB/s either way, interleaved runs); the time goes
// to the rank whose core is shared, which must write the whole result into
// its own memory either way. With it, chunk_bytes is the piece of the fused
// read and reduction: 256 KiB and 1 MiB measured alike (a 32 MiB f32 half
// read from another process and added in 6.4-6.9 ms on an idle core).
#ifndef LOOM_UCX_OPTIONS_H
#define LOOM_UCX_OPTIONS_H

#include "loom/cxx/options.hpp"
#include "loom/plugin.h"

namespace loom_ucx {

enum OptionIndex {
  kOptTransports,
  kOptTimeoutMs,
  kOptRingThreshold,
  kOptTreePipelineThreshold,
  kOptChunkBytes,
  kOptPipelineDepth,
  kOptCmaThreshold,
  kOptCmaWholeBlocks,
  kOptCmaOnlyOversubscribed,
  kOptKeepaliveMs,
  kOptSpinUs,
  kOptYieldUs,
  kOptListen,
  kNumOptions
};

inline constexpr loom_option_decl kOptions[kNumOptions] = {
    {sizeof(loom_option_decl), LOOM_OPTION_STRING_LIST, "transports", "",
     "UCX transports to use (UCX_TLS syntax, e.g. sm,self or tcp); empty lets UCX choose, honouring UCX_TLS."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "timeout_ms", "300000",
     "Milliseconds a wait or comm_create may block when the communicator config gives no timeout."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "ring_threshold_bytes", "8192",
     "Allreduce payloads of at least this many bytes use the pipelined ring (reduce-scatter then allgather); "
     "smaller ones use recursive doubling."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "tree_pipeline_threshold_bytes", "16384",
     "Broadcast, reduce and alltoall payloads of at least this many bytes are sent in place and pipelined in "
     "chunks; smaller ones travel as one staged message with the header."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "chunk_bytes", "262144",
     "Pipeline chunk size in bytes: reduction of one chunk overlaps the transfer of the next. With whole blocks by "
     "cross-memory attach (all ranks on one host): the piece read and reduced at a time."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "pipeline_depth", "4",
     "Chunks in flight per link in pipelined algorithms (receive buffers of chunk_bytes each)."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "cma_threshold_bytes", "65536",
     "Messages of at least this many bytes between ranks of one host are read straight from the sender's memory "
     "(cross-memory attach, one copy) instead of passing through UCX's shared memory (two copies); -1: never."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "cma_whole_blocks", "false",
     "With every rank on one host, ring steps whose blocks reach cma_threshold_bytes move each block as one "
     "cross-memory-attach message, read and reduced by the receiver in chunk_bytes pieces; false: chunked like "
     "other transports. Set alike on every rank."},
    {sizeof(loom_option_decl), LOOM_OPTION_BOOL, "cma_only_oversubscribed", "true",
     "Use cross-memory attach only between ranks of a host that runs more of the communicator's ranks than it has "
     "CPUs; with a CPU per rank, UCX's shared memory is faster (sender and receiver copy in parallel)."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "keepalive_ms", "500",
     "How often UCX checks that peers are alive, and the plugin that members' processes on this host still run: a "
     "peer that died without a word (or exited and was not reaped yet) is reported within about twice this."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "spin_us", "50",
     "Microseconds a wait polls without yielding the core."},
    {sizeof(loom_option_decl), LOOM_OPTION_INT, "yield_us", "5000",
     "Microseconds a wait then polls while yielding the core before it starts sleeping between polls; keep it "
     "high when ranks oversubscribe the cores."},
    {sizeof(loom_option_decl), LOOM_OPTION_STRING, "listen", "",
     "Address (or name) of this machine whose network interface UCX's network transports may use, so UCX's TCP "
     "listener binds only that interface's address (it sets UCX_NET_DEVICES); empty or a wildcard (0.0.0.0, ::) "
     "leaves the choice to UCX, which listens on every interface's address. A collab strategy passes its own "
     "listen here unless [collective.options] sets it."},
};

// The table's order must follow OptionIndex: a swapped pair compiles and
// silently reads one option's value for another.
using loom::cxx::same_name;
static_assert(same_name(kOptions[kOptTransports].name, "transports") &&
                  same_name(kOptions[kOptTimeoutMs].name, "timeout_ms") &&
                  same_name(kOptions[kOptRingThreshold].name, "ring_threshold_bytes") &&
                  same_name(kOptions[kOptTreePipelineThreshold].name, "tree_pipeline_threshold_bytes") &&
                  same_name(kOptions[kOptChunkBytes].name, "chunk_bytes") &&
                  same_name(kOptions[kOptPipelineDepth].name, "pipeline_depth") &&
                  same_name(kOptions[kOptCmaThreshold].name, "cma_threshold_bytes") &&
                  same_name(kOptions[kOptCmaWholeBlocks].name, "cma_whole_blocks") &&
                  same_name(kOptions[kOptCmaOnlyOversubscribed].name, "cma_only_oversubscribed") &&
                  same_name(kOptions[kOptKeepaliveMs].name, "keepalive_ms") &&
                  same_name(kOptions[kOptSpinUs].name, "spin_us") && same_name(kOptions[kOptYieldUs].name, "yield_us") &&
                  same_name(kOptions[kOptListen].name, "listen"),
              "kOptions is out of step with OptionIndex");

}  // namespace loom_ucx

#endif  // LOOM_UCX_OPTIONS_H
