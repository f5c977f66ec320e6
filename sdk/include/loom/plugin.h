/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loom/plugin.h: what every Loom plugin and the Loom host agree on.
 *
 * A Loom plugin is a shared object named lib<name>_<kind>.so that exports
 * exactly one symbol per kind it implements, with the ABI major in its name:
 *
 *     loom_collective_plugin_v1   (see loom/collective.h)
 *     loom_strategy_plugin_v1     (see loom/strategy.h)
 *
 * Each entry symbol is a negotiation function (loom_entry_v1_fn). The host
 * passes the ABI range it speaks; the plugin answers with the version it chose
 * and its vtable, or refuses. Everything else in the plugin MUST be hidden
 * (-fvisibility=hidden plus a version script with "local: *;").
 *
 * Rules that hold for every struct in this SDK:
 *  - It starts with uint32_t struct_size, set by whoever fills it in.
 *    Fields are only ever appended; a reader uses min(struct_size, sizeof).
 *  - No C++ types and no exceptions cross the boundary. Strings are
 *    NUL-terminated UTF-8 with the lifetime stated where they appear.
 *  - Memory a plugin allocates is freed only by that plugin, and memory the
 *    host allocates only by the host.
 *  - Every function returns a loom_status unless stated otherwise.
 *
 * This header is C99 and C++ compatible and needs nothing to link.
 */
#ifndef LOOM_PLUGIN_H
#define LOOM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions ----------------------------------------------------------- */

/* An ABI version is (major << 16) | minor. A new major renames the entry
 * symbol (_v2); a new minor only appends fields and functions at the end of
 * a struct, or adds capability bits. Whoever reads an appended member first
 * checks the struct's struct_size (or the negotiated minor) covers it, so a
 * 1.0 plugin keeps working with a 1.1 host and the other way round.
 *
 *   1.0  first stable ABI
 *   1.1  LOOM_CAP_INLINE_COMPLETION (collective.h); loom_training_state_v1
 *        .max_steps and loom_strategy_v1.sample_salt (strategy.h)
 *   1.2  loom_training_state_v1.optimizer_state (strategy.h)
 *   1.3  loom_collective_v1.allreduce_scaled and LOOM_CAP_SCALED_ALLREDUCE
 *        (collective.h)
 *   1.4  loom_training_state_v1.buffers (strategy.h)
 *   1.5  loom_training_state_v1.description and LOOM_CAP_HEALS_NONFINITE
 *        (strategy.h)
 *   1.6  loom_training_state_v1.device, .stream and the device memory
 *        services, and LOOM_CAP_DEVICE_MEMORY (strategy.h)
 *   1.7  loom_host_v1.oob_open and .oob_close (this file);
 *        loom_collective_v1.comm_last_error and .absent_ops with the
 *        LOOM_OP_* bits (collective.h)
 *   1.8  loom_strategy_v1.load_state (strategy.h)
 *   1.9  loom_host_v1.stop_requested (this file)
 *   1.10 loom_training_state_v1.window_loss (strategy.h)
 *   1.11 loom_collective_v1.comm_stats and loom_comm_stats_v1
 *        (collective.h) */
#define LOOM_ABI_MAKE(major, minor) ((((uint32_t)(major)) << 16) | ((uint32_t)(minor) & 0xffffu))
#define LOOM_ABI_MAJOR_OF(v) ((uint32_t)(v) >> 16)
#define LOOM_ABI_MINOR_OF(v) ((uint32_t)(v) & 0xffffu)

#define LOOM_ABI_MAJOR 1
#define LOOM_ABI_MINOR 11
#define LOOM_ABI_VERSION LOOM_ABI_MAKE(LOOM_ABI_MAJOR, LOOM_ABI_MINOR)
/* The oldest version of this major that hosts and plugins still accept. */
#define LOOM_ABI_VERSION_MIN LOOM_ABI_MAKE(LOOM_ABI_MAJOR, 0)

/* Marks the entry symbol(s) of a plugin as exported. */
#if defined(__GNUC__) || defined(__clang__)
#define LOOM_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define LOOM_PLUGIN_EXPORT
#endif

/* ---- Status codes ------------------------------------------------------- */

/* Fixed 32-bit codes; their numeric values never change. On any code other
 * than LOOM_OK the callee leaves a message for last_error() where it has a
 * context to hold it. */
typedef int32_t loom_status;
enum {
  LOOM_OK = 0,
  /* The caller passed something invalid (NULL, bad count, dtype, overlap,
   * arguments that differ across ranks). Retrying the same call fails again. */
  LOOM_ERR_INVALID_ARGUMENT = 1,
  /* The plugin does not implement this operation, dtype or capability. */
  LOOM_ERR_UNSUPPORTED = 2,
  /* The plugin cannot work in this process or machine (no device, not
   * started by its launcher, library missing); the message says why. */
  LOOM_ERR_UNAVAILABLE = 3,
  /* The operation did not finish within its timeout. It may still be
   * pending: wait again, or abort the communicator. */
  LOOM_ERR_TIMEOUT = 4,
  /* A peer died or became unreachable; the communicator is unusable and
   * every later operation on it fails the same way. */
  LOOM_ERR_PEER_FAILED = 5,
  /* The communicator was aborted (possibly from another thread). */
  LOOM_ERR_ABORTED = 6,
  /* The operating system or an underlying library failed (out of memory,
   * socket error, MPI error); the message carries the detail. */
  LOOM_ERR_SYSTEM = 7,
  /* A bug: the plugin or host broke its own invariants or the contract. */
  LOOM_ERR_INTERNAL = 8
};

/* ---- Plugin kinds ------------------------------------------------------- */

typedef uint32_t loom_kind;
enum { LOOM_KIND_COLLECTIVE = 1, LOOM_KIND_STRATEGY = 2 };

/* ---- Options ------------------------------------------------------------ */

/* Option value types. The host validates configured values against the
 * declared type before the plugin sees them. */
typedef uint32_t loom_option_type;
enum {
  LOOM_OPTION_BOOL = 1,   /* "true" / "false" */
  LOOM_OPTION_INT = 2,    /* decimal int64 */
  LOOM_OPTION_FLOAT = 3,  /* decimal double */
  LOOM_OPTION_STRING = 4, /* any UTF-8 text */
  LOOM_OPTION_STRING_LIST = 5 /* comma-separated strings */
};

/* One option a plugin accepts. Plugins publish a static array of these in
 * their vtable; the strings are static and live as long as the plugin. */
typedef struct loom_option_decl {
  uint32_t struct_size;
  loom_option_type type;
  const char *name;          /* [a-z0-9_]+, unique within the plugin */
  const char *default_value; /* text form; NULL means "required, no default" */
  const char *help;          /* one sentence */
} loom_option_decl;

/* ---- Host services ------------------------------------------------------ */

/* Log levels, as spdlog orders them. */
typedef int32_t loom_log_level;
enum {
  LOOM_LOG_TRACE = 0,
  LOOM_LOG_DEBUG = 1,
  LOOM_LOG_INFO = 2,
  LOOM_LOG_WARN = 3,
  LOOM_LOG_ERROR = 4
};

/* Timeouts are in milliseconds; this value means "the default of the object
 * the call is made on" (the communicator's, or the host's store timeout). */
#define LOOM_TIMEOUT_DEFAULT ((int64_t)-1)

/* The services the host gives a plugin at init. The table and everything it
 * points to stay valid until the host has called the plugin's fini. Every
 * function takes host_ctx as its first argument. Unless stated otherwise,
 * every function may be called from any thread. */
/* Defined in loom/collective.h; declared here for loom_host_v1.oob_open. */
struct loom_oob_v1;

typedef struct loom_host_v1 {
  uint32_t struct_size;
  uint32_t abi_version; /* the version negotiated for this plugin */
  void *host_ctx;

  /* Writes one message into the host's log, attributed to the plugin.
   * Plugins never print to stdout/stderr themselves. */
  void (*log)(void *host_ctx, loom_log_level level, const char *message);

  /* Looks up one of the plugin's declared options. *value receives the
   * configured value or the declared default, in text form, already checked
   * against the declared type; the string is owned by the host and lives
   * until fini. Returns LOOM_ERR_INVALID_ARGUMENT for an undeclared name and
   * LOOM_ERR_UNAVAILABLE for a required option that was not set. Plugins
   * never call getenv: the host maps the environment onto options (a
   * strategy's option `name` may be set as LOOM_<NAME>, which overrides the
   * config file). */
  loom_status (*get_option)(void *host_ctx, const char *name, const char **value);

  /* Rendezvous store shared by all processes of the job (c10d's Store).
   * Returns LOOM_ERR_UNAVAILABLE when the job has no store (no MASTER_ADDR).
   * Its contract:
   *  - One key space for the whole job: every process and every plugin in
   *    it sees the same keys. Keys starting with "loom/" belong to the host;
   *    a plugin starts its keys with its own name and a slash ("ddp/...").
   *  - store_set overwrites: the last write wins, and a reader racing a
   *    writer gets the old value or the new one, never a mix. Nothing is
   *    deleted before the job ends, so write bounded values and a bounded
   *    number of keys (the store keeps them in memory).
   *  - A key must be unique to what it carries: a group that exchanges
   *    more than once needs a counter in its keys that every member
   *    advances in the same order. oob_open (ABI 1.7) does this for the
   *    common case, an allgather among the members of a new group. */
  loom_status (*store_set)(void *host_ctx, const char *key, const void *value, size_t len);
  /* Waits until key exists (or timeout_ms passes: LOOM_ERR_TIMEOUT), then
   * copies up to capacity bytes into buf and sets *len to the value's full
   * length. A value longer than capacity gives LOOM_ERR_INVALID_ARGUMENT with
   * *len set, so the caller can retry with a larger buffer. */
  loom_status (*store_get)(void *host_ctx, const char *key, void *buf, size_t capacity, size_t *len,
                           int64_t timeout_ms);
  /* Atomically adds delta to the integer stored at key (0 if absent) and
   * stores the new value in *result. */
  loom_status (*store_add)(void *host_ctx, const char *key, int64_t delta, int64_t *result);

  /* Opens another plugin by kind and name, initialised with its own options
   * from the job's configuration. *vtable receives the plugin's negotiated
   * vtable (a const loom_collective_v1 * for LOOM_KIND_COLLECTIVE) and
   * *instance its initialised context. The caller MUST give the instance back
   * with close_plugin before its own fini returns. */
  loom_status (*open_plugin)(void *host_ctx, loom_kind kind, const char *name, const void **vtable,
                             void **instance);
  void (*close_plugin)(void *host_ctx, void *instance);

  /* The job this process belongs to, from the launcher's environment
   * (RANK / WORLD_SIZE / LOCAL_RANK, or mpirun's); -1 when unknown. */
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;

  /* ABI 1.7 (present when struct_size >= LOOM_HOST_V1_7_SIZE): an
   * out-of-band exchange over the job's store, for a plugin that creates
   * communicators itself (a strategy passes it in loom_comm_config_v1.oob).
   * scope names the group, the same text on every member (at most 200
   * bytes of [A-Za-z0-9_./-]); rank and size are this member's place in it.
   * Each member opens a scope the same number of times in the same order;
   * the host keys every exchange by the plugin, the scope, how many times
   * this process opened it before and how many exchanges ran on this
   * handle before, so exchanges never meet stale or foreign values. With
   * size 1 the exchange is a copy and needs no store. *oob (owned by the
   * host) lives until oob_close or fini; the host may run several handles
   * at once, each used by one thread at a time. Returns
   * LOOM_ERR_INVALID_ARGUMENT for a bad scope, rank or size. The exchange
   * itself returns LOOM_ERR_UNAVAILABLE when size > 1 and the job has no
   * store (a collective that bootstraps itself never calls it, so opening
   * one costs nothing where no store exists). */
  loom_status (*oob_open)(void *host_ctx, const char *scope, int32_t rank, int32_t size,
                          const struct loom_oob_v1 **oob);
  void (*oob_close)(void *host_ctx, const struct loom_oob_v1 *oob);

  /* ABI 1.9 (present when struct_size >= LOOM_HOST_V1_9_SIZE; may be NULL):
   * 1 once this process has been asked to stop (`loom train` got SIGINT or
   * SIGTERM), else 0. The host then ends training at the next step boundary
   * and calls teardown. A plugin waiting for others (a swarm peer looking
   * for a group) gives up such waits and returns, so that the process leaves
   * within a bounded time; it still finishes what others already count on
   * (a round whose group has formed), since leaving that would make them
   * wait out their timeouts. Callable from any thread, cheap to poll. */
  int32_t (*stop_requested)(void *host_ctx);
} loom_host_v1;

/* Sizes of the host table as ABI 1.0 froze it, with 1.7's and 1.9's members. */
#define LOOM_HOST_V1_0_SIZE 88u
#define LOOM_HOST_V1_7_SIZE 104u
#define LOOM_HOST_V1_9_SIZE 112u
/* Whether a plugin may call host->field: the host's table is new enough to
 * hold it (a newer plugin may run under an older host) and it is set. */
#define LOOM_HOST_HAS(host, field) \
  ((host)->struct_size >= offsetof(loom_host_v1, field) + sizeof((host)->field) && (host)->field != NULL)

/* ---- Plugin description -------------------------------------------------- */

/* What a plugin says about itself; every kind's vtable points to one. All of
 * it is static and lives as long as the plugin is loaded. */
typedef struct loom_plugin_info {
  uint32_t struct_size;
  loom_kind kind;
  const char *name;        /* must equal <name> in lib<name>_<kind>.so */
  const char *version;     /* the plugin's own version, "major.minor.patch" */
  const char *description; /* one line */
  uint64_t capabilities;   /* kind-specific LOOM_CAP_* bits */
  const loom_option_decl *options;
  uint32_t num_options;
} loom_plugin_info;

/* ---- Negotiation ------------------------------------------------------- */

/* What the host offers, filled in by the host. */
typedef struct loom_negotiate_request {
  uint32_t struct_size;
  loom_kind kind;   /* the kind of the symbol being called */
  uint32_t abi_min; /* lowest ABI version the host speaks */
  uint32_t abi_max; /* highest ABI version the host speaks */
} loom_negotiate_request;

/* What the plugin answers. The host sets struct_size to the capacity it
 * allocated; the plugin writes only fields that fit.
 *
 * Two versions meet here. reply->abi_version is the negotiated one: both
 * sides use what it defines and nothing newer. The vtable's own abi_version
 * says which ABI its layout was written for (what the plugin was built
 * with); it is at least the negotiated one, and its struct_size covers at
 * least that version's members. So one static vtable built for 1.7 serves
 * a 1.2 host, which reads only what 1.2 defines; a host refuses a reply
 * newer than the vtable it points to. */
typedef struct loom_negotiate_reply {
  uint32_t struct_size;
  uint32_t abi_version; /* chosen, within [abi_min, abi_max] */
  const void *vtable;   /* static; e.g. const loom_collective_v1 *; lives as long as the plugin */
  const char *refusal;  /* static text when the plugin refuses, else NULL */
} loom_negotiate_reply;

/* The type of every entry symbol. Returns LOOM_OK with the reply filled in,
 * or LOOM_ERR_UNSUPPORTED with reply->refusal saying which versions the
 * plugin speaks. Must not allocate, block or have side effects: the host may
 * call it in a scanner process only to list the plugin. */
typedef loom_status (*loom_entry_v1_fn)(const loom_negotiate_request *request, loom_negotiate_reply *reply);

/* Size and layout of the v1 structs are frozen. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define LOOM_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define LOOM_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#else /* C99: a negative array size fails to compile. One extern array,
       * redeclared by every check (C allows compatible redeclarations), so
       * no two checks, in any headers, need distinct names. */
#define LOOM_STATIC_ASSERT(cond, msg) extern char loom_static_assert_v1[(cond) ? 1 : -1]
#endif

#if UINTPTR_MAX == 0xffffffffffffffffu
LOOM_STATIC_ASSERT(sizeof(loom_option_decl) == 32, "loom_option_decl v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_option_decl, help) == 24, "loom_option_decl v1 layout is frozen");
LOOM_STATIC_ASSERT(sizeof(loom_host_v1) == LOOM_HOST_V1_9_SIZE, "loom_host_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_host_v1, stop_requested) == LOOM_HOST_V1_7_SIZE, "1.9 appends after 1.7");
LOOM_STATIC_ASSERT(offsetof(loom_host_v1, oob_open) == LOOM_HOST_V1_0_SIZE, "1.7 appends after 1.0");
LOOM_STATIC_ASSERT(offsetof(loom_host_v1, log) == 16, "loom_host_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_host_v1, close_plugin) == 64, "loom_host_v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_host_v1, local_rank) == 80, "loom_host_v1 layout is frozen");
LOOM_STATIC_ASSERT(sizeof(loom_plugin_info) == 56, "loom_plugin_info v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_plugin_info, options) == 40, "loom_plugin_info v1 layout is frozen");
LOOM_STATIC_ASSERT(sizeof(loom_negotiate_request) == 16, "loom_negotiate_request v1 layout is frozen");
LOOM_STATIC_ASSERT(sizeof(loom_negotiate_reply) == 24, "loom_negotiate_reply v1 layout is frozen");
LOOM_STATIC_ASSERT(offsetof(loom_negotiate_reply, refusal) == 16, "loom_negotiate_reply v1 layout is frozen");
#endif

/* Returns the fixed name of a status code ("LOOM_ERR_TIMEOUT"), or "unknown". */
static inline const char *loom_status_name(loom_status s) {
  switch (s) {
    case LOOM_OK: return "LOOM_OK";
    case LOOM_ERR_INVALID_ARGUMENT: return "LOOM_ERR_INVALID_ARGUMENT";
    case LOOM_ERR_UNSUPPORTED: return "LOOM_ERR_UNSUPPORTED";
    case LOOM_ERR_UNAVAILABLE: return "LOOM_ERR_UNAVAILABLE";
    case LOOM_ERR_TIMEOUT: return "LOOM_ERR_TIMEOUT";
    case LOOM_ERR_PEER_FAILED: return "LOOM_ERR_PEER_FAILED";
    case LOOM_ERR_ABORTED: return "LOOM_ERR_ABORTED";
    case LOOM_ERR_SYSTEM: return "LOOM_ERR_SYSTEM";
    case LOOM_ERR_INTERNAL: return "LOOM_ERR_INTERNAL";
    default: return "unknown";
  }
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_PLUGIN_H */
