// Test harness for kpatch's load-time hook: plays ROCr's part without a GPU.
//
// Built by tests/delivery/test_hook.py with g++ against Debian's
// /usr/include/hsa/hsa_api_trace.h (libhsa-runtime-dev).  That header is C++
// (decltype), hence a C++ harness.  It fills a real HsaApiTable/CoreApiTable
// the way ROCr does (major_id, minor_id = sizeof, step_id) with recording
// stand-ins, dlopens the hook, calls OnLoad like ROCr's LoadTools, and then
// loads code objects through the table's entries - what every exported
// hsa_* function does.  The stand-ins write the bytes they receive to files.
//
//   harness HOOK.so OUTDIR [options] API:FILE...
//     API: memory | file | deserialize
//     --threads N        every thread loads every API:FILE (default 1)
//     --table-major N --core-major N --core-minor N --table-minor N --no-core
//                        what OnLoad is given (default: the header's values)
//
// Output lines:
//   onload RESULT table=unchanged|changed memory=hooked|same file=... deserialize=...
//   load THREAD INDEX API STATUS(hex) SIZE OUTFILE|- FILE
#include <hsa_api_trace.h>

#include "kpatch_hsa_table.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// The hook's C mirror of the tables must agree with ROCr's header.
static_assert(sizeof(CoreApiTable) == sizeof(kp_core_api_table), "CoreApiTable size");
static_assert(sizeof(ApiTableVersion) == sizeof(kp_api_table_version), "ApiTableVersion size");
static_assert(offsetof(CoreApiTable, hsa_code_object_deserialize_fn) ==
                  offsetof(kp_core_api_table, hsa_code_object_deserialize_fn), "deserialize slot");
static_assert(offsetof(CoreApiTable, hsa_code_object_reader_create_from_file_fn) ==
                  offsetof(kp_core_api_table, hsa_code_object_reader_create_from_file_fn), "from_file slot");
static_assert(offsetof(CoreApiTable, hsa_code_object_reader_create_from_memory_fn) ==
                  offsetof(kp_core_api_table, hsa_code_object_reader_create_from_memory_fn), "from_memory slot");
static_assert(offsetof(CoreApiTable, hsa_executable_iterate_program_symbols_fn) ==
                  offsetof(kp_core_api_table, hsa_executable_iterate_program_symbols_fn), "last slot");
static_assert(offsetof(HsaApiTable, core_) == offsetof(kp_hsa_api_table, core_), "core_");
static_assert(sizeof(HsaApiTable) == sizeof(kp_hsa_api_table), "HsaApiTable size");
static_assert(HSA_STATUS_ERROR_INVALID_CODE_OBJECT == KP_STATUS_ERROR_INVALID_CODE_OBJECT, "status value");

static std::string g_out;
static std::atomic<int> g_seq{0};
static thread_local std::string t_last;  // file the last stand-in call wrote

static void record(const void *data, size_t size) {
  char name[64];
  snprintf(name, sizeof name, "/recv-%d.bin", g_seq.fetch_add(1));
  std::string path = g_out + name;
  FILE *f = fopen(path.c_str(), "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size)) {
    perror(path.c_str());
    exit(3);
  }
  fclose(f);
  t_last = path;
}

static hsa_status_t stand_from_memory(const void *code_object, size_t size, hsa_code_object_reader_t *reader) {
  record(code_object, size);
  reader->handle = 0x1000 + g_seq.load();
  return HSA_STATUS_SUCCESS;
}

// as ROCr's CodeObjectReaderImpl::LoadFromFile: the whole file from offset 0
static hsa_status_t stand_from_file(hsa_file_t file, hsa_code_object_reader_t *reader) {
  off_t size = lseek(file, 0, SEEK_END);
  if (size <= 0 || lseek(file, 0, SEEK_SET) != 0) return HSA_STATUS_ERROR_INVALID_FILE;
  std::vector<char> buf(size);
  if (read(file, buf.data(), size) != size) return HSA_STATUS_ERROR_INVALID_FILE;
  record(buf.data(), size);
  reader->handle = 0x2000 + g_seq.load();
  return HSA_STATUS_SUCCESS;
}

static hsa_status_t stand_deserialize(void *data, size_t size, const char *options, hsa_code_object_t *co) {
  record(data, size);
  co->handle = 0x3000 + g_seq.load();
  return HSA_STATUS_SUCCESS;
}

static HsaApiTableContainer g_tables;  // ROCr's own initialisation: versions and sizes
static std::vector<std::pair<std::string, std::string>> g_loads;

struct Job {
  int thread;
};

static void *run(void *arg) {
  int t = static_cast<Job *>(arg)->thread;
  CoreApiTable *core = &g_tables.core;  // the table the exported hsa_* functions use
  for (size_t i = 0; i < g_loads.size(); i++) {
    const std::string &api = g_loads[i].first, &file = g_loads[i].second;
    t_last.clear();
    hsa_status_t st = HSA_STATUS_ERROR;
    size_t size = 0;
    if (api == "file") {
      int fd = open(file.c_str(), O_RDONLY);
      if (fd < 0) {
        perror(file.c_str());
        exit(3);
      }
      hsa_code_object_reader_t reader;
      st = core->hsa_code_object_reader_create_from_file_fn(fd, &reader);
      close(fd);
    } else {
      FILE *f = fopen(file.c_str(), "rb");
      if (!f) {
        perror(file.c_str());
        exit(3);
      }
      std::vector<char> buf;
      char chunk[65536];
      size_t n;
      while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf.insert(buf.end(), chunk, chunk + n);
      fclose(f);
      if (api == "memory") {
        hsa_code_object_reader_t reader;
        st = core->hsa_code_object_reader_create_from_memory_fn(buf.data(), buf.size(), &reader);
      } else {
        hsa_code_object_t co;
        st = core->hsa_code_object_deserialize_fn(buf.data(), buf.size(), "", &co);
      }
      // the caller's buffer goes away: a hook that passed it on must not need it any more
      memset(buf.data(), 0xA5, buf.size());
    }
    struct stat sb;
    if (!t_last.empty() && stat(t_last.c_str(), &sb) == 0) size = sb.st_size;
    printf("load %d %zu %s %x %zu %s %s\n", t, i, api.c_str(), (unsigned)st, size,
           t_last.empty() ? "-" : t_last.c_str(), file.c_str());
    fflush(stdout);
  }
  return nullptr;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: harness HOOK.so OUTDIR [options] API:FILE...\n");
    return 2;
  }
  const char *hook = argv[1];
  g_out = argv[2];
  int threads = 1;
  bool no_core = false;
  HsaApiTable &root = g_tables.root;
  CoreApiTable &core = g_tables.core;
  core.hsa_code_object_reader_create_from_memory_fn = stand_from_memory;
  core.hsa_code_object_reader_create_from_file_fn = stand_from_file;
  core.hsa_code_object_deserialize_fn = stand_deserialize;
  for (int i = 3; i < argc; i++) {
    std::string a = argv[i];
    auto num = [&]() { return (uint32_t)strtoul(argv[++i], nullptr, 0); };
    if (a == "--threads") threads = (int)num();
    else if (a == "--table-major") root.version.major_id = num();
    else if (a == "--table-minor") root.version.minor_id = num();
    else if (a == "--core-major") core.version.major_id = num();
    else if (a == "--core-minor") core.version.minor_id = num();
    else if (a == "--no-core") no_core = true;
    else {
      size_t c = a.find(':');
      if (c == std::string::npos) {
        fprintf(stderr, "bad argument %s\n", a.c_str());
        return 2;
      }
      g_loads.emplace_back(a.substr(0, c), a.substr(c + 1));
    }
  }
  if (no_core) root.core_ = nullptr;
  HsaApiTable root_before = root;
  CoreApiTable core_before = core;

  void *lib = dlopen(hook, RTLD_LAZY);  // as ROCr does
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 3;
  }
  typedef bool (*OnLoadFn)(HsaApiTable *, uint64_t, uint64_t, const char *const *);
  auto on_load = reinterpret_cast<OnLoadFn>(dlsym(lib, "OnLoad"));
  if (!on_load || !dlsym(lib, "OnUnload")) {
    fprintf(stderr, "the hook lacks OnLoad/OnUnload\n");
    return 3;
  }
  bool ok = on_load(&root, 1, 0, nullptr);
  bool unchanged = memcmp(&root, &root_before, sizeof root) == 0 && memcmp(&core, &core_before, sizeof core) == 0;
  auto state = [](bool same) { return same ? "same" : "hooked"; };
  printf("onload %d table=%s memory=%s file=%s deserialize=%s\n", ok ? 1 : 0, unchanged ? "unchanged" : "changed",
         state(core.hsa_code_object_reader_create_from_memory_fn == stand_from_memory),
         state(core.hsa_code_object_reader_create_from_file_fn == stand_from_file),
         state(core.hsa_code_object_deserialize_fn == stand_deserialize));
  fflush(stdout);
  if (!ok) {
    dlclose(lib);  // ROCr unloads a tool whose OnLoad returns false
    // loads then go straight to the runtime
  }
  std::vector<pthread_t> ids(threads);
  std::vector<Job> jobs(threads);
  for (int t = 0; t < threads; t++) {
    jobs[t].thread = t;
    pthread_create(&ids[t], nullptr, run, &jobs[t]);
  }
  for (int t = 0; t < threads; t++) pthread_join(ids[t], nullptr);
  if (ok) {
    auto stat = reinterpret_cast<unsigned long (*)(int)>(dlsym(lib, "kpatch_hook_stat"));
    if (stat) printf("stats mapped=%lu spawned=%lu\n", stat(0), stat(1));
    auto on_unload = reinterpret_cast<void (*)()>(dlsym(lib, "OnUnload"));
    on_unload();
  }
  return 0;
}
