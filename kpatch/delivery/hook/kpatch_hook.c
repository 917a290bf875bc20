/*
 * kpatch load-time hook: an HSA tools library (HSA_TOOLS_LIB) that hands
 * every gfx1030 code object the process loads through kpatch's patcher.
 *
 * ROCr dlopens the libraries named in HSA_TOOLS_LIB during hsa_init and
 * calls OnLoad(table, ...) with the table every exported hsa_* function
 * dispatches through.  OnLoad checks the table's version fields (below) and
 * replaces three entries of its CoreApiTable:
 *
 *   hsa_code_object_reader_create_from_memory  (HIP/CLR: every code object)
 *   hsa_code_object_reader_create_from_file    (read whole from offset 0, as ROCr does)
 *   hsa_code_object_deserialize                (deprecated v1.0 path)
 *
 * For each object: an ELF64 AMDGPU object whose EF_AMDGPU_MACH is the mode's
 * source processor (override: gfx1030, harden: gfx1010) is keyed by its
 * content (kpatch_object_key), looked up in the cache
 * ($KPATCH_CACHE_DIR/objects/<k[0:2]>/<key>.<mode>.rec/.co), and on a miss
 * patched by `$KPATCH_PYTHON -m kpatch.delivery.patcher` under an exclusive
 * flock on locks/<key>.<mode>.lock (re-checked after the lock is taken, so
 * threads and processes patch each object once).  A usable .co (size and key
 * as its record says) is mmapped, kept for the life of the process, and
 * passed on instead of the original.  Everything else - other targets,
 * non-AMDGPU bytes, safe/refused/error records, a missing patcher, a timeout,
 * any failure - passes the original bytes on unchanged, with one JSON log
 * line per object in $KPATCH_LOG.  KPATCH_STRICT=1 makes refused/partial
 * objects fail with HSA_STATUS_ERROR_INVALID_CODE_OBJECT instead.
 *
 * Table checks, as ROCr defines the ABI (hsa_api_trace.h): every table starts
 * with ApiTableVersion{major_id, minor_id, step_id}; major_id names the layout
 * (HsaApiTable 1 in ROCm 5.x, 3 in 6.x+; CoreApiTable 1 in 5.x, 2 in 6.x+;
 * the fields the hook touches sit at the same offsets in all of them) and
 * minor_id is the table's size in bytes (ROCr sets it to sizeof), so a field
 * exists only if it ends at or before minor_id.  An unknown major_id, a table
 * too small to hold the replaced entries, or a NULL table makes OnLoad return
 * false without touching the table (ROCr then unloads the library).
 *
 * Environment (read once, in OnLoad): KPATCH_CACHE_DIR (else
 * $XDG_CACHE_HOME/kpatch, else ~/.cache/kpatch), KPATCH_MODE (override |
 * harden), KPATCH_PYTHON, KPATCH_STRICT, KPATCH_LOG, KPATCH_TIMEOUT (seconds
 * per patcher run, default 600), KPATCH_DEBUG (patcher stderr to ours).
 *
 * Plain C, no Python.h; thread-safe (no shared mutable state besides atomic
 * counters); never calls exit/abort.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kpatch_hsa_table.h"

#define KP_EXPORT __attribute__((visibility("default")))

extern char **environ;

/* ------------------------------------------------------------------------ */
/* content key                                                               */
/* ------------------------------------------------------------------------ */

/*
 * kpatch-key-1: a 128-bit non-cryptographic hash of the bytes with the size
 * mixed in.  Four independent 64-bit lanes consume 32-byte stripes with the
 * xxHash64 round (acc = rotl(acc + in * P2, 31) * P1); the tail is zero-padded
 * into one more stripe (the size, mixed into the seed and both outputs, tells
 * padded inputs apart).  Two outputs fold the four lanes with different
 * rotations and go through the xxHash64 avalanche.  It is a cache key, not a
 * security boundary: the patcher re-checks the key of what it patches, and the
 * hook checks a .co's size and key against its record before using it.
 */
#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rd64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8); /* little-endian hosts only (x86-64, aarch64): ROCr runs on nothing else */
  return v;
}
static inline uint64_t round64(uint64_t acc, uint64_t in) { return rotl64(acc + in * P2, 31) * P1; }
static inline uint64_t merge64(uint64_t h, uint64_t v) { return (h ^ round64(0, v)) * P1 + P4; }
static inline uint64_t avalanche64(uint64_t h) {
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

KP_EXPORT void kpatch_object_key(const void *data, size_t size, char out[33]) {
  const unsigned char *p = (const unsigned char *)data;
  uint64_t seed = (uint64_t)size * P5 ^ 0x6b70617463682d31ULL; /* "kpatch-1" */
  uint64_t v0 = seed + P1 + P2, v1 = seed + P2, v2 = seed, v3 = seed - P1;
  size_t n = size;
  while (n >= 32) {
    v0 = round64(v0, rd64(p));
    v1 = round64(v1, rd64(p + 8));
    v2 = round64(v2, rd64(p + 16));
    v3 = round64(v3, rd64(p + 24));
    p += 32;
    n -= 32;
  }
  if (n) {
    unsigned char tail[32] = {0};
    memcpy(tail, p, n);
    v0 = round64(v0, rd64(tail));
    v1 = round64(v1, rd64(tail + 8));
    v2 = round64(v2, rd64(tail + 16));
    v3 = round64(v3, rd64(tail + 24));
  }
  uint64_t h1 = rotl64(v0, 1) + rotl64(v1, 7) + rotl64(v2, 12) + rotl64(v3, 18);
  h1 = merge64(merge64(merge64(merge64(h1, v0), v1), v2), v3);
  h1 = avalanche64(h1 ^ (uint64_t)size);
  uint64_t h2 = rotl64(v0, 41) ^ rotl64(v1, 29) ^ rotl64(v2, 53) ^ rotl64(v3, 3);
  h2 = merge64(merge64(merge64(merge64(h2 + P5, v3), v2), v1), v0);
  h2 = avalanche64(h2 ^ ((uint64_t)size * P3));
  static const char hexd[] = "0123456789abcdef";
  for (int i = 0; i < 8; i++) {
    out[i * 2] = hexd[(h1 >> (60 - 8 * i)) & 0xf];
    out[i * 2 + 1] = hexd[(h1 >> (56 - 8 * i)) & 0xf];
    out[16 + i * 2] = hexd[(h2 >> (60 - 8 * i)) & 0xf];
    out[16 + i * 2 + 1] = hexd[(h2 >> (56 - 8 * i)) & 0xf];
  }
  out[32] = '\0';
}

/* ------------------------------------------------------------------------ */
/* configuration and state                                                   */
/* ------------------------------------------------------------------------ */

#define EM_AMDGPU 224
#define MACH_GFX1010 0x033
#define MACH_GFX1030 0x036

static struct {
  char cache[PATH_MAX];
  char mode[16];
  unsigned source_mach;
  char python[PATH_MAX];
  bool have_python;
  bool strict;
  char log[PATH_MAX];
  bool have_log;
  double timeout;
  bool debug;
} cfg;

static kp_reader_from_memory_fn orig_from_memory;
static kp_reader_from_file_fn orig_from_file;
static kp_deserialize_fn orig_deserialize;
static int installed;             /* OnLoad replaced the entries (atomic) */
static unsigned long n_spawned;    /* patcher runs (atomic) */

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* append src to buf (cap bytes, at *len) as a JSON string (with quotes); NULL -> null */
static void json_str(char *buf, size_t cap, size_t *len, const char *src) {
  if (*len + 8 >= cap) return;
  if (!src) {
    *len += (size_t)snprintf(buf + *len, cap - *len, "null");
    return;
  }
  buf[(*len)++] = '"';
  for (const unsigned char *s = (const unsigned char *)src; *s && *len + 8 < cap; s++) {
    unsigned char c = *s;
    if (c == '"' || c == '\\') {
      buf[(*len)++] = '\\';
      buf[(*len)++] = (char)c;
    } else if (c < 0x20 || c >= 0x7f) {
      *len += (size_t)snprintf(buf + *len, cap - *len, "\\u%04x", c);
    } else {
      buf[(*len)++] = (char)c;
    }
  }
  buf[(*len)++] = '"';
  buf[*len] = '\0';
}

static void add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len = (size_t)n >= cap - *len ? cap - 1 : *len + (size_t)n;
}

/* One JSON line to $KPATCH_LOG (O_APPEND, one write) and, under KPATCH_DEBUG, stderr. */
static void log_line(const char *api, const char *key, size_t size, const char *target, const char *action,
                     const char *cache, double ms, const char *reason) {
  if (!cfg.have_log && !cfg.debug) return;
  char buf[4096];
  size_t len = 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  add(buf, sizeof buf, &len, "{\"time\": \"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\", \"pid\": %ld, \"api\": ",
      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L,
      (long)getpid());
  json_str(buf, sizeof buf, &len, api);
  add(buf, sizeof buf, &len, ", \"key\": ");
  json_str(buf, sizeof buf, &len, key);
  add(buf, sizeof buf, &len, ", \"size\": %zu, \"target\": ", size);
  json_str(buf, sizeof buf, &len, target);
  add(buf, sizeof buf, &len, ", \"action\": ");
  json_str(buf, sizeof buf, &len, action);
  add(buf, sizeof buf, &len, ", \"cache\": ");
  json_str(buf, sizeof buf, &len, cache);
  add(buf, sizeof buf, &len, ", \"ms\": %.3f, \"reason\": ", ms);
  json_str(buf, sizeof buf, &len, reason);
  add(buf, sizeof buf, &len, "}\n");
  if (len == 0 || buf[len - 1] != '\n') { /* truncated: still one valid line */
    len = len > sizeof buf - 3 ? sizeof buf - 3 : len;
    buf[len++] = '\n';
  }
  if (cfg.have_log) {
    int fd = open(cfg.log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ssize_t w = write(fd, buf, len);
      (void)w;
      close(fd);
    }
  }
  if (cfg.debug) {
    ssize_t w = write(2, buf, len);
    (void)w;
  }
}

static int mkdirs(const char *path) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
  for (char *p = tmp + 1; *p; p++) {
    if (*p == '/') {
      *p = '\0';
      if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  }
  if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
  return 0;
}

/* read a whole regular file descriptor from offset 0 (pread: the fd's offset is kept) */
static unsigned char *read_fd(int fd, size_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) return NULL;
  size_t n = (size_t)st.st_size;
  unsigned char *buf = malloc(n);
  if (!buf) return NULL;
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(buf);
      return NULL;
    }
    got += (size_t)r;
  }
  *size = n;
  return buf;
}

static const char *mach_name(unsigned mach, char *buf, size_t cap) {
  if (mach == MACH_GFX1030) return "gfx1030";
  if (mach == MACH_GFX1010) return "gfx1010";
  snprintf(buf, cap, "EF_AMDGPU_MACH 0x%03x", mach);
  return buf;
}

/* 1 and the EF_AMDGPU_MACH value if data is an ELF64 little-endian AMDGPU object */
static int amdgpu_mach(const unsigned char *d, size_t size, unsigned *mach) {
  if (!d || size < 64) return 0;
  if (memcmp(d, "\x7f" "ELF", 4) != 0 || d[4] != 2 /* ELFCLASS64 */ || d[5] != 1 /* LSB */) return 0;
  if ((unsigned)(d[18] | d[19] << 8) != EM_AMDGPU) return 0;
  uint32_t flags;
  memcpy(&flags, d + 48, 4);
  *mach = flags & 0xff;
  return 1;
}

/* ------------------------------------------------------------------------ */
/* cache                                                                     */
/* ------------------------------------------------------------------------ */

struct entry {
  char status[16]; /* patched | partial | safe | refused | error */
  size_t out_size;
  char out_key[40];
  const void *mapped; /* the .co, for patched/partial */
};

static int entry_path(char *out, size_t cap, const char *key, const char *ext) {
  return snprintf(out, cap, "%s/objects/%.2s/%s.%s.%s", cfg.cache, key, key, cfg.mode, ext) < (int)cap ? 0 : -1;
}

/*
 * The patched objects this process has mapped, by output key: a second load of
 * the same object reuses its mapping (mappings grow with distinct objects, not
 * with loads). Never shrinks: ROCr may use a buffer until its executable dies.
 */
struct kept { char out_key[33]; size_t size; const void *p; };
static struct kept *kept;
static size_t n_kept, cap_kept;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static const void *kept_find(const char *out_key, size_t size) {
  const void *p = NULL;
  pthread_mutex_lock(&kept_lock);
  for (size_t i = 0; i < n_kept && !p; i++)
    if (kept[i].size == size && strcmp(kept[i].out_key, out_key) == 0) p = kept[i].p;
  pthread_mutex_unlock(&kept_lock);
  return p;
}

/* remember a verified mapping; returns the one to use (an earlier one if another thread won) */
static const void *kept_add(const char *out_key, size_t size, const void *p) {
  const void *use = p;
  pthread_mutex_lock(&kept_lock);
  for (size_t i = 0; i < n_kept; i++)
    if (kept[i].size == size && strcmp(kept[i].out_key, out_key) == 0) use = kept[i].p;
  if (use == p && n_kept == cap_kept) {
    size_t cap = cap_kept ? 2 * cap_kept : 64;
    struct kept *k = realloc(kept, cap * sizeof *k);
    if (k) { kept = k; cap_kept = cap; }
  }
  if (use == p && n_kept < cap_kept) {
    snprintf(kept[n_kept].out_key, sizeof kept[n_kept].out_key, "%s", out_key);
    kept[n_kept].size = size;
    kept[n_kept].p = p;
    n_kept++;
  }
  pthread_mutex_unlock(&kept_lock);
  return use;
}

/* map a .co and check it against the record; 0 ok, -1 missing or not what the record says */
static int map_co(const char *key, struct entry *e) {
  const void *known = kept_find(e->out_key, e->out_size);
  if (known) { /* mapped and verified by an earlier load in this process */
    e->mapped = known;
    return 0;
  }
  char path[PATH_MAX];
  if (entry_path(path, sizeof path, key, "co") != 0) return -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != e->out_size || e->out_size == 0) {
    close(fd);
    return -1;
  }
  /* MAP_PRIVATE + PROT_WRITE: a runtime that writes into the buffer writes its own copy */
  void *p = mmap(NULL, e->out_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return -1;
  char k[33];
  kpatch_object_key(p, e->out_size, k);
  if (strcmp(k, e->out_key) != 0) {
    munmap(p, e->out_size);
    return -1;
  }
  e->mapped = kept_add(e->out_key, e->out_size, p);
  if (e->mapped != p) munmap(p, e->out_size); /* another thread kept the same bytes first */
  return 0;
}

/*
 * Look the object up: 1 = usable entry in *e (mapped if patched/partial),
 * 0 = no entry, -1 = an entry that is corrupt (bad record line, or a .co whose
 * size/key differ from the record): to be redone.
 */
static int lookup(const char *key, struct entry *e) {
  char path[PATH_MAX];
  if (entry_path(path, sizeof path, key, "rec") != 0) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char line[256];
  ssize_t n = pread(fd, line, sizeof line - 1, 0);
  close(fd);
  if (n <= 0) return -1;
  line[n] = '\0';
  char *nl = strchr(line, '\n');
  if (!nl) return -1;
  *nl = '\0';
  int version;
  unsigned long long out_size;
  char status[16], out_key[40];
  if (sscanf(line, "kpatch-cache %d %15s %llu %39s", &version, status, &out_size, out_key) != 4 || version != 1)
    return -1;
  memset(e, 0, sizeof *e);
  snprintf(e->status, sizeof e->status, "%s", status);
  e->out_size = (size_t)out_size;
  snprintf(e->out_key, sizeof e->out_key, "%s", out_key);
  if (!strcmp(status, "patched") || !strcmp(status, "partial")) {
    if (strlen(out_key) != 32 || map_co(key, e) != 0) return -1;
    return 1;
  }
  if (!strcmp(status, "safe") || !strcmp(status, "refused") || !strcmp(status, "error")) return 1;
  return -1;
}

/* take the exclusive lock for (key, mode), polling until deadline; fd or -1.
 * `kpatch cache prune` unlinks a lock file while holding its lock, so a lock
 * taken on a file that is no longer at `path` protects nothing: it is dropped
 * and the path opened again (the file locked must be the file at the path). */
static int take_lock(const char *key, double deadline) {
  char dir[PATH_MAX], path[PATH_MAX];
  if (snprintf(dir, sizeof dir, "%s/locks", cfg.cache) >= (int)sizeof dir) return -1;
  if (mkdirs(dir) != 0) return -1;
  if (snprintf(path, sizeof path, "%s/%s.%s.lock", dir, key, cfg.mode) >= (int)sizeof path) return -1;
  for (;;) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    int locked = 0;
    for (;;) {
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) { locked = 1; break; }
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      if (now_ms() > deadline) break;
      struct timespec ts = {0, 5 * 1000000L};
      nanosleep(&ts, NULL);
    }
    if (!locked) { close(fd); return -1; }
    struct stat held, named;
    if (fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino)
      return fd;
    close(fd);   /* pruned while we waited: lock the file now at the path */
    if (now_ms() > deadline) return -1;
  }
}

static int write_all(int fd, const void *data, size_t size) {
  const unsigned char *p = data;
  while (size) {
    ssize_t w = write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    size -= (size_t)w;
  }
  return 0;
}

/* posix_spawn file actions that close every descriptor above 2 in the child */
static void close_host_fds(posix_spawn_file_actions_t *fa) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(fa, 3);
#else
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  int self = dirfd(d);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    int fd = atoi(de->d_name);
    if (fd > 2 && fd != self) posix_spawn_file_actions_addclose(fa, fd);
  }
  closedir(d);
#endif
}

/*
 * Run the patcher on the object (written to a temp file under cache/tmp):
 * its own process group, stdin/stdout /dev/null, stderr to a temp file whose
 * last line becomes the reason; killed (the whole group) when the timeout
 * passes.  0 = exited 0, else -1 with *reason set.
 */
static int run_patcher(const char *key, const void *data, size_t size, char *reason, size_t cap) {
  char dir[PATH_MAX], in[PATH_MAX], err[PATH_MAX];
  long tid = (long)syscall(SYS_gettid);
  if (snprintf(dir, sizeof dir, "%s/tmp", cfg.cache) >= (int)sizeof dir || mkdirs(dir) != 0) {
    snprintf(reason, cap, "cannot create %s/tmp: %s", cfg.cache, strerror(errno));
    return -1;
  }
  snprintf(in, sizeof in, "%s/%s.%s.%ld.%ld.in", dir, key, cfg.mode, (long)getpid(), tid);
  snprintf(err, sizeof err, "%s/%s.%s.%ld.%ld.err", dir, key, cfg.mode, (long)getpid(), tid);
  int fd = open(in, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write_all(fd, data, size) != 0) {
    snprintf(reason, cap, "cannot write the object to %s: %s", in, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(in);
    return -1;
  }
  close(fd);

  char *argv[] = {cfg.python, "-m", "kpatch.delivery.patcher", "--cache", cfg.cache, "--mode", cfg.mode,
                  "--key", (char *)key, in, NULL};
  /* the child's environment: ours without HSA_TOOLS_LIB (no hook inside the patcher) */
  size_t nenv = 0;
  for (char **e = environ; e && *e; e++) nenv++;
  char **envp = calloc(nenv + 1, sizeof *envp);
  if (!envp) {
    snprintf(reason, cap, "out of memory");
    unlink(in);
    return -1;
  }
  size_t j = 0;
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, "HSA_TOOLS_LIB=", 14) != 0) envp[j++] = *e;
  envp[j] = NULL;

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  if (!cfg.debug) posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  close_host_fds(&fa);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGPIPE);
  sigaddset(&dfl, SIGINT);
  sigaddset(&dfl, SIGTERM);
  sigaddset(&dfl, SIGCHLD);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid;
  int rc = posix_spawn(&pid, cfg.python, &fa, &attr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  free(envp);
  if (rc != 0) {
    snprintf(reason, cap, "cannot start the patcher %s: %s", cfg.python, strerror(rc));
    unlink(in);
    unlink(err);
    return -1;
  }
  __atomic_add_fetch(&n_spawned, 1, __ATOMIC_RELAXED);

  double deadline = now_ms() + cfg.timeout * 1e3;
  int status = 0, result = -1;
  bool done = false, timed_out = false;
  long sleep_us = 1000;
  while (!done) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      done = true;
    } else if (w < 0 && errno == ECHILD) { /* the host reaps children itself (SIGCHLD ignored) */
      status = -1;
      done = true;
    } else if (w < 0 && errno != EINTR) {
      status = -1;
      done = true;
    } else if (now_ms() > deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      timed_out = done = true;
    } else {
      struct timespec ts = {0, sleep_us * 1000L};
      nanosleep(&ts, NULL);
      if (sleep_us < 20000) sleep_us *= 2;
    }
  }
  if (timed_out) {
    snprintf(reason, cap, "the patcher did not finish within KPATCH_TIMEOUT=%g s; killed", cfg.timeout);
  } else if (status == -1) {
    result = 0; /* exit status unknown (reaped elsewhere): the record decides */
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    result = 0;
  } else {
    char tail[512] = "";
    int efd = open(err, O_RDONLY | O_CLOEXEC);
    if (efd >= 0) {
      struct stat st;
      if (fstat(efd, &st) == 0) {
        off_t off = st.st_size > (off_t)sizeof tail - 1 ? st.st_size - (off_t)sizeof tail + 1 : 0;
        ssize_t n = pread(efd, tail, sizeof tail - 1, off);
        tail[n > 0 ? n : 0] = '\0';
        while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == '\r')) tail[--n] = '\0';
      }
      close(efd);
    }
    char *last = strrchr(tail, '\n');
    const char *msg = last ? last + 1 : tail;
    if (WIFSIGNALED(status))
      snprintf(reason, cap, "the patcher was killed by signal %d%s%s", WTERMSIG(status), *msg ? ": " : "", msg);
    else
      snprintf(reason, cap, "the patcher exited with status %d%s%s", WEXITSTATUS(status), *msg ? ": " : "", msg);
  }
  unlink(in);
  unlink(err);
  return result;
}

/* ------------------------------------------------------------------------ */
/* one object                                                                */
/* ------------------------------------------------------------------------ */

enum decision { PASS, USE, FAIL };

/*
 * Decide what the runtime gets for one object: PASS (the original), USE
 * (out, out_size: the patched .co, mapped for the process' life) or FAIL
 * (strict mode and a refused/partial object).  Logs one line.
 */
static enum decision process(const char *api, const void *data, size_t size, const void **out, size_t *out_size) {
  double t0 = now_ms();
  unsigned mach;
  char namebuf[32];
  if (!amdgpu_mach(data, size, &mach)) {
    log_line(api, NULL, size, NULL, "not-amdgpu", NULL, now_ms() - t0, NULL);
    return PASS;
  }
  const char *target = mach_name(mach, namebuf, sizeof namebuf);
  char key[33];
  kpatch_object_key(data, size, key);
  if (mach != cfg.source_mach) {
    log_line(api, key, size, target, "other-target", NULL, now_ms() - t0, NULL);
    return PASS;
  }
  struct entry e;
  const char *cache = "hit";
  char reason[1024] = "";
  int found = lookup(key, &e);
  if (found != 1) {
    cache = "miss";
    int lock = take_lock(key, now_ms() + (cfg.timeout + 60) * 1e3);
    if (lock < 0) {
      snprintf(reason, sizeof reason, "cannot take the cache lock for %s under %s/locks: %s", key, cfg.cache,
               strerror(errno));
      log_line(api, key, size, target, "error", cache, now_ms() - t0, reason);
      return PASS;
    }
    found = lookup(key, &e); /* another thread or process may have patched it meanwhile */
    if (found != 1) {
      if (!cfg.have_python) {
        close(lock);
        log_line(api, key, size, target, "passthrough", cache, now_ms() - t0,
                 "no patcher (KPATCH_PYTHON is not set): the original object is loaded");
        return PASS;
      }
      if (run_patcher(key, data, size, reason, sizeof reason) == 0) {
        found = lookup(key, &e);
        if (found != 1)
          snprintf(reason, sizeof reason, "the patcher stored no usable cache entry for %s", key);
      }
    }
    close(lock);
    if (found != 1) {
      log_line(api, key, size, target, "error", cache, now_ms() - t0, reason);
      return PASS;
    }
  }
  const char *st = e.status;
  bool unsafe = !strcmp(st, "refused") || !strcmp(st, "partial");
  if (cfg.strict && unsafe) {
    log_line(api, key, size, target, st, cache, now_ms() - t0,
             "KPATCH_STRICT=1: not loaded (HSA_STATUS_ERROR_INVALID_CODE_OBJECT)");
    return FAIL;
  }
  if (e.mapped) {
    *out = e.mapped;
    *out_size = e.out_size;
    log_line(api, key, size, target, st, cache, now_ms() - t0, NULL);
    return USE;
  }
  log_line(api, key, size, target, st, cache, now_ms() - t0,
           !strcmp(st, "error") ? "the patcher failed on this object earlier (cache record): original loaded"
                                : NULL);
  return PASS;
}

/* ------------------------------------------------------------------------ */
/* the replaced entries                                                      */
/* ------------------------------------------------------------------------ */

static kp_status_t w_from_memory(const void *code_object, size_t size, kp_reader_t *reader) {
  const void *p = NULL;
  size_t n = 0;
  enum decision d = process("from_memory", code_object, size, &p, &n);
  if (d == FAIL) return KP_STATUS_ERROR_INVALID_CODE_OBJECT;
  return d == USE ? orig_from_memory(p, n, reader) : orig_from_memory(code_object, size, reader);
}

static kp_status_t w_from_file(kp_file_t file, kp_reader_t *reader) {
  size_t size = 0;
  unsigned char *buf = read_fd(file, &size);
  if (!buf) {
    log_line("from_file", NULL, 0, NULL, "passthrough", NULL, 0.0, "cannot read the file descriptor");
    return orig_from_file(file, reader);
  }
  const void *p = NULL;
  size_t n = 0;
  enum decision d = process("from_file", buf, size, &p, &n);
  free(buf);
  if (d == FAIL) return KP_STATUS_ERROR_INVALID_CODE_OBJECT;
  /* the patched object is kept mapped, so a memory reader over it lives as long as a file reader */
  return d == USE ? orig_from_memory(p, n, reader) : orig_from_file(file, reader);
}

static kp_status_t w_deserialize(void *serialized, size_t size, const char *options, kp_code_object_t *co) {
  const void *p = NULL;
  size_t n = 0;
  enum decision d = process("deserialize", serialized, size, &p, &n);
  if (d == FAIL) return KP_STATUS_ERROR_INVALID_CODE_OBJECT;
  return d == USE ? orig_deserialize((void *)p, n, options, co) : orig_deserialize(serialized, size, options, co);
}

/* ------------------------------------------------------------------------ */
/* OnLoad / OnUnload                                                         */
/* ------------------------------------------------------------------------ */

#define FIELD_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* known table layouts (major_id) whose fields used here sit where this file expects */
#define HSA_API_TABLE_MAJOR_MIN 1
#define HSA_API_TABLE_MAJOR_MAX 3
#define CORE_API_TABLE_MAJOR_MIN 1
#define CORE_API_TABLE_MAJOR_MAX 2

static const char *read_config(void) {
  const char *v;
  memset(&cfg, 0, sizeof cfg);
  v = getenv("KPATCH_LOG");
  if (v && *v && strlen(v) < sizeof cfg.log) {
    snprintf(cfg.log, sizeof cfg.log, "%s", v);
    cfg.have_log = true;
  }
  v = getenv("KPATCH_DEBUG");
  cfg.debug = v && *v && strcmp(v, "0") != 0;
  v = getenv("KPATCH_STRICT");
  cfg.strict = v && *v && strcmp(v, "0") != 0;
  v = getenv("KPATCH_MODE");
  if (!v || !*v || !strcmp(v, "override")) {
    snprintf(cfg.mode, sizeof cfg.mode, "override");
    cfg.source_mach = MACH_GFX1030;
  } else if (!strcmp(v, "harden")) {
    snprintf(cfg.mode, sizeof cfg.mode, "harden");
    cfg.source_mach = MACH_GFX1010;
  } else {
    return "KPATCH_MODE must be override or harden";
  }
  v = getenv("KPATCH_TIMEOUT");
  cfg.timeout = 600.0;
  if (v && *v) {
    char *end;
    double t = strtod(v, &end);
    if (*end || !(t > 0) || t > 1e7) return "KPATCH_TIMEOUT must be a positive number of seconds";
    cfg.timeout = t;
  }
  v = getenv("KPATCH_PYTHON");
  if (v && *v) {
    if (strlen(v) >= sizeof cfg.python) return "KPATCH_PYTHON is too long";
    snprintf(cfg.python, sizeof cfg.python, "%s", v);
    cfg.have_python = true;
  }
  const char *dir = getenv("KPATCH_CACHE_DIR");
  const char *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  int n;
  if (dir && *dir)
    n = snprintf(cfg.cache, sizeof cfg.cache, "%s", dir);
  else if (xdg && xdg[0] == '/')
    n = snprintf(cfg.cache, sizeof cfg.cache, "%s/kpatch", xdg);
  else if (home && *home)
    n = snprintf(cfg.cache, sizeof cfg.cache, "%s/.cache/kpatch", home);
  else
    return "no cache directory: set KPATCH_CACHE_DIR (HOME is not set)";
  if (n >= (int)sizeof cfg.cache - 128) return "the cache directory path is too long";
  return NULL;
}

static bool refuse(const char *why) {
  fprintf(stderr, "kpatch: the load-time hook is not active: %s\n", why);
  log_line("OnLoad", NULL, 0, NULL, "error", NULL, 0.0, why);
  return false;
}

KP_EXPORT bool OnLoad(void *table_arg, uint64_t runtime_version, uint64_t failed_tool_count,
                      const char *const *failed_tool_names) {
  (void)runtime_version;
  (void)failed_tool_count;
  (void)failed_tool_names;
  struct kp_hsa_api_table *table = table_arg;
  if (__atomic_load_n(&installed, __ATOMIC_ACQUIRE)) return true; /* OnLoad twice: wrap once */
  const char *bad = read_config();
  if (bad) return refuse(bad);
  char why[256];
  if (!table) return refuse("OnLoad got no HsaApiTable");
  if (table->version.major_id < HSA_API_TABLE_MAJOR_MIN || table->version.major_id > HSA_API_TABLE_MAJOR_MAX) {
    snprintf(why, sizeof why, "HsaApiTable major_id %u is not a layout this hook knows (%d..%d)",
             table->version.major_id, HSA_API_TABLE_MAJOR_MIN, HSA_API_TABLE_MAJOR_MAX);
    return refuse(why);
  }
  if (table->version.minor_id < FIELD_END(struct kp_hsa_api_table, core_)) {
    snprintf(why, sizeof why, "HsaApiTable is %u bytes (minor_id), too small to hold core_",
             table->version.minor_id);
    return refuse(why);
  }
  struct kp_core_api_table *core = table->core_;
  if (!core) return refuse("HsaApiTable has no CoreApiTable");
  if (core->version.major_id < CORE_API_TABLE_MAJOR_MIN || core->version.major_id > CORE_API_TABLE_MAJOR_MAX) {
    snprintf(why, sizeof why, "CoreApiTable major_id %u is not a layout this hook knows (%d..%d)",
             core->version.major_id, CORE_API_TABLE_MAJOR_MIN, CORE_API_TABLE_MAJOR_MAX);
    return refuse(why);
  }
  size_t need = FIELD_END(struct kp_core_api_table, hsa_code_object_reader_create_from_memory_fn);
  if (core->version.minor_id < need) {
    snprintf(why, sizeof why,
             "CoreApiTable is %u bytes (minor_id), too small to hold "
             "hsa_code_object_reader_create_from_memory_fn (needs %zu)",
             core->version.minor_id, need);
    return refuse(why);
  }
  if (!core->hsa_code_object_reader_create_from_memory_fn)
    return refuse("CoreApiTable has no hsa_code_object_reader_create_from_memory_fn");
  orig_from_memory = core->hsa_code_object_reader_create_from_memory_fn;
  orig_from_file = core->hsa_code_object_reader_create_from_file_fn;
  orig_deserialize = core->hsa_code_object_deserialize_fn;
  core->hsa_code_object_reader_create_from_memory_fn = w_from_memory;
  if (orig_from_file) core->hsa_code_object_reader_create_from_file_fn = w_from_file;
  if (orig_deserialize) core->hsa_code_object_deserialize_fn = w_deserialize;
  __atomic_store_n(&installed, 1, __ATOMIC_RELEASE);
  char note[PATH_MAX + 128];
  snprintf(note, sizeof note, "hook active: mode %s, cache %s%s%s", cfg.mode, cfg.cache,
           cfg.strict ? ", strict" : "", cfg.have_python ? "" : ", no patcher (KPATCH_PYTHON unset)");
  log_line("OnLoad", NULL, 0, NULL, "hooked", NULL, 0.0, note);
  return true;
}

/* ROCr calls this at hsa_shut_down.  Patched objects stay mapped: an
 * executable may outlive the table in a misbehaving host. */
KP_EXPORT void OnUnload(void) {}

/* counters for tests and benchmarks: 0 = distinct patched objects mapped and kept, 1 = patcher runs */
KP_EXPORT unsigned long kpatch_hook_stat(int which) {
  if (which != 0) return __atomic_load_n(&n_spawned, __ATOMIC_RELAXED);
  pthread_mutex_lock(&kept_lock);
  unsigned long n = n_kept;
  pthread_mutex_unlock(&kept_lock);
  return n;
}
