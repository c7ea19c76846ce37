/* remotecache-abi: prints the binary interface of remotecache.h and remotecache_admin.h as one JSON
 * object on stdout: the size, alignment and field offsets of every struct, the status codes and the
 * numeric limits.
 *
 *   {"api_version":3,"structs":{"rc_config":{"size":16,"align":4,"fields":[{"name":...,"offset":0,
 *    "size":4},...]},...},"statuses":{"RC_OK":0,...},"defines":{"RC_MAX_TOKEN_BYTES":64,...}}
 *
 * A test helper, not shipped: the .NET tests compare it with their managed mirrors of the header.
 * It is C, not C++, so that the layouts are the ones a C compiler gives, which is what the platform
 * ABI (and so P/Invoke marshalling) follows.
 *
 * The tables below are written by hand, so the tool checks them against the compiler before it
 * prints anything: a field added to a struct in the header but not here leaves a hole or a short
 * struct, and the tool exits with status 1 naming the struct. (The ctest abi.coverage checks the
 * other direction: every struct, status and define of the header appears in the output.) */
#include <remotecache/remotecache.h>
#include <remotecache/remotecache_admin.h>

#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

typedef struct field_layout {
  const char* name;
  size_t offset;
  size_t size;
  size_t align;
} field_layout;

typedef struct struct_layout {
  const char* name;
  size_t size;
  size_t align;
  const field_layout* fields;
  size_t field_count;
} struct_layout;

typedef struct named_value {
  const char* name;
  long long value;
} named_value;

#define COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))
#define FIELD(type, member)                                                                     \
  {                                                                                             \
    #member, offsetof(type, member), sizeof(((type*)0)->member), alignof(__typeof__(((type*)0)->member)) \
  }
#define STRUCT(type) \
  { #type, sizeof(type), alignof(type), type##_fields, COUNT_OF(type##_fields) }
#define VALUE(name) \
  { #name, (long long)(name) }

/* ---- the header, in header order ---------------------------------------------------------- */

static const field_layout rc_config_fields[] = {
    FIELD(rc_config, client_threads),
    FIELD(rc_config, server_threads),
    FIELD(rc_config, batch_size),
    FIELD(rc_config, queue_depth),
};

static const field_layout rc_cache_options_fields[] = {
    FIELD(rc_cache_options, cache_id),
    FIELD(rc_cache_options, token),
    FIELD(rc_cache_options, regions_per_server),
    FIELD(rc_cache_options, config),
    FIELD(rc_cache_options, session_capacity),
    FIELD(rc_cache_options, op_timeout_ms),
    FIELD(rc_cache_options, connect_timeout_ms),
    FIELD(rc_cache_options, flags),
    FIELD(rc_cache_options, capabilities),
    FIELD(rc_cache_options, seal_key),
    FIELD(rc_cache_options, seal_block_size),
    FIELD(rc_cache_options, reserved),
};

static const field_layout rc_completion_fields[] = {
    FIELD(rc_completion, tag),
    FIELD(rc_completion, status),
    FIELD(rc_completion, reserved),
};

static const field_layout rc_region_info_fields[] = {
    FIELD(rc_region_info, holder),
    FIELD(rc_region_info, holder_region),
    FIELD(rc_region_info, size),
    FIELD(rc_region_info, moving),
    FIELD(rc_region_info, reserved),
};

static const field_layout rc_server_options_fields[] = {
    FIELD(rc_server_options, listen),
    FIELD(rc_server_options, listen_count),
    FIELD(rc_server_options, region_size),
    FIELD(rc_server_options, memory_limit),
    FIELD(rc_server_options, max_threads),
    FIELD(rc_server_options, max_connections),
    FIELD(rc_server_options, max_connections_per_peer),
    FIELD(rc_server_options, shm_socket_mode),
    FIELD(rc_server_options, admission_key),
    FIELD(rc_server_options, admission_key_length),
    FIELD(rc_server_options, server_id),
    FIELD(rc_server_options, allowed_uids),
    FIELD(rc_server_options, allowed_uid_count),
    FIELD(rc_server_options, commit_memory),
};

static const field_layout rc_object_counts_fields[] = {
    FIELD(rc_object_counts, caches),
    FIELD(rc_object_counts, sessions),
    FIELD(rc_object_counts, servers),
};

/* remotecache_admin.h */

static const field_layout rc_server_stats_fields[] = {
    FIELD(rc_server_stats, size),
    FIELD(rc_server_stats, server_threads),
    FIELD(rc_server_stats, memory_limit),
    FIELD(rc_server_stats, memory_lent),
    FIELD(rc_server_stats, region_size),
    FIELD(rc_server_stats, uptime_ms),
    FIELD(rc_server_stats, caches),
    FIELD(rc_server_stats, regions_lent),
    FIELD(rc_server_stats, data_connections),
    FIELD(rc_server_stats, admin_connections),
    FIELD(rc_server_stats, server_id),
};

static const field_layout rc_admin_cache_fields[] = {
    FIELD(rc_admin_cache, cache_id),
    FIELD(rc_admin_cache, lease_end_unix_ms),
    FIELD(rc_admin_cache, regions),
    FIELD(rc_admin_cache, connections),
    FIELD(rc_admin_cache, server_threads),
    FIELD(rc_admin_cache, exclusive),
};

static const field_layout rc_pull_request_fields[] = {
    FIELD(rc_pull_request, cache_id),
    FIELD(rc_pull_request, target_region),
    FIELD(rc_pull_request, source_region),
    FIELD(rc_pull_request, source_endpoint),
    FIELD(rc_pull_request, source_capability),
    FIELD(rc_pull_request, timeout_ms),
    FIELD(rc_pull_request, max_mib_per_s),
    FIELD(rc_pull_request, regions),
    FIELD(rc_pull_request, reserved),
};

static const field_layout rc_pull_result_fields[] = {
    FIELD(rc_pull_result, bytes),
    FIELD(rc_pull_result, elapsed_ns),
    FIELD(rc_pull_result, one_sided),
    FIELD(rc_pull_result, reserved),
};

static const struct_layout structs[] = {
    STRUCT(rc_config),
    STRUCT(rc_cache_options),
    STRUCT(rc_completion),
    STRUCT(rc_region_info),
    STRUCT(rc_server_options),
    STRUCT(rc_object_counts),
    STRUCT(rc_server_stats),
    STRUCT(rc_admin_cache),
    STRUCT(rc_pull_request),
    STRUCT(rc_pull_result),
};

static const named_value statuses[] = {
    VALUE(RC_OK),
    VALUE(RC_E_INVALID_ARGUMENT),
    VALUE(RC_E_OUT_OF_RANGE),
    VALUE(RC_E_DISCONNECTED),
    VALUE(RC_E_AUTH),
    VALUE(RC_E_NO_MEMORY),
    VALUE(RC_E_BUSY),
    VALUE(RC_E_TIMEOUT),
    VALUE(RC_E_PROTOCOL),
    VALUE(RC_E_CLOSED),
    VALUE(RC_E_UNSUPPORTED),
    VALUE(RC_E_INTERNAL),
    VALUE(RC_E_EXPIRED),
    VALUE(RC_E_IN_USE),
    VALUE(RC_E_LIMIT),
    VALUE(RC_E_INTEGRITY),
};

static const named_value defines[] = {
    VALUE(RC_API_VERSION),
    VALUE(RC_MAX_TOKEN_BYTES),
    VALUE(RC_MAX_REGIONS_PER_SERVER),
    VALUE(RC_MAX_ENDPOINTS),
    VALUE(RC_MAX_CLIENT_THREADS),
    VALUE(RC_MAX_SERVER_THREADS),
    VALUE(RC_MAX_BATCH_SIZE),
    VALUE(RC_MAX_QUEUE_DEPTH),
    VALUE(RC_MAX_CAPABILITY_TEXT),
    VALUE(RC_MAX_SERVER_ID_BYTES),
    VALUE(RC_DEFAULT_SESSION_CAPACITY),
    VALUE(RC_DEFAULT_OP_TIMEOUT_MS),
    VALUE(RC_DEFAULT_CONNECT_TIMEOUT_MS),
    VALUE(RC_DEFAULT_REGION_SIZE),
    VALUE(RC_DEFAULT_MEMORY_LIMIT),
    VALUE(RC_DEFAULT_MAX_CONNECTIONS),
    VALUE(RC_DEFAULT_MAX_CONNECTIONS_PER_PEER),
    VALUE(RC_DEFAULT_SHM_SOCKET_MODE),
    VALUE(RC_MIN_ADMISSION_KEY_BYTES),
    VALUE(RC_MAX_SESSION_CAPACITY),
    VALUE(RC_SEAL_KEY_BYTES),
    VALUE(RC_DEFAULT_SEAL_BLOCK),
    VALUE(RC_MIN_SEAL_BLOCK),
    VALUE(RC_MAX_SEAL_BLOCK),
    VALUE(RC_SEAL_TRAILER_BYTES),
    VALUE(RC_SEAL_KEY_CHECK_BYTES),
    VALUE(RC_OPEN_EXCLUSIVE),
    VALUE(RC_MIGRATION_PAUSE_READS),
    VALUE(RC_MAX_ADMIN_CONNECTIONS),
    VALUE(RC_DEFAULT_ADMIN_TIMEOUT_MS),
    VALUE(RC_DEFAULT_PULL_TIMEOUT_MS),
    VALUE(RC_MAX_PULL_ENDPOINT_BYTES),
    VALUE(RC_MAX_LEASE_AHEAD_MS),
};

/* ---- checking the tables ------------------------------------------------------------------ */

static size_t round_up(size_t n, size_t align) { return (n + align - 1) / align * align; }

/* Each field must sit exactly where the compiler would put it right after the previous listed
 * one, and the struct must end right after the last one: any gap big enough to hold a field, or a
 * tail past the last field, is a field the table does not list. */
static int check_struct(const struct_layout* s) {
  size_t end = 0;
  for (size_t i = 0; i < s->field_count; ++i) {
    const field_layout* f = &s->fields[i];
    if (f->offset < end) {
      fprintf(stderr, "remotecache-abi: %s.%s at offset %zu overlaps the previous field (ends at %zu): "
                      "the table lists the fields of %s out of order\n",
              s->name, f->name, f->offset, end, s->name);
      return 0;
    }
    if (f->offset != round_up(end, f->align)) {
      fprintf(stderr, "remotecache-abi: %s has %zu unlisted bytes before %s (offset %zu, expected %zu): "
                      "a field of the header is missing from this tool's table for %s\n",
              s->name, f->offset - end, f->name, f->offset, round_up(end, f->align), s->name);
      return 0;
    }
    end = f->offset + f->size;
  }
  if (round_up(end, s->align) != s->size) {
    fprintf(stderr, "remotecache-abi: %s is %zu bytes but its listed fields end at %zu (%zu with padding): "
                    "a field of the header is missing from this tool's table for %s\n",
            s->name, s->size, end, round_up(end, s->align), s->name);
    return 0;
  }
  return 1;
}

/* ---- output ------------------------------------------------------------------------------- */

static void print_struct(const struct_layout* s) {
  printf("\"%s\":{\"size\":%zu,\"align\":%zu,\"fields\":[", s->name, s->size, s->align);
  for (size_t i = 0; i < s->field_count; ++i) {
    const field_layout* f = &s->fields[i];
    printf("%s{\"name\":\"%s\",\"offset\":%zu,\"size\":%zu}", i == 0 ? "" : ",", f->name, f->offset, f->size);
  }
  printf("]}");
}

static void print_values(const char* key, const named_value* values, size_t count) {
  printf("\"%s\":{", key);
  for (size_t i = 0; i < count; ++i) printf("%s\"%s\":%lld", i == 0 ? "" : ",", values[i].name, values[i].value);
  printf("}");
}

int main(void) {
  int ok = 1;
  for (size_t i = 0; i < COUNT_OF(structs); ++i) ok &= check_struct(&structs[i]);
  if (!ok) return 1;

  printf("{\"api_version\":%d,\"structs\":{", RC_API_VERSION);
  for (size_t i = 0; i < COUNT_OF(structs); ++i) {
    if (i > 0) printf(",");
    print_struct(&structs[i]);
  }
  printf("},");
  print_values("statuses", statuses, COUNT_OF(statuses));
  printf(",");
  print_values("defines", defines, COUNT_OF(defines));
  printf("}\n");
  return fflush(stdout) == 0 ? 0 : 1;
}
