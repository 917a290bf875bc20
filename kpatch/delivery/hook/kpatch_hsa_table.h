/*
 * The part of ROCr's tool ABI the kpatch hook uses, in plain C.
 *
 * ROCr's own header (hsa/hsa_api_trace.h) is C++ (decltype) and is not
 * installed on most machines that install kpatch, so the hook carries this
 * mirror.  Field names and order are those of ROCr's CoreApiTable and
 * HsaApiTable (Debian libhsa-runtime-dev 5.2.3; ROCr keeps the same layout
 * up to ROCm 7 and only appends).  Every field is a pointer; the three the
 * hook replaces have their real signatures.  tests/delivery/harness.cpp
 * includes this file next to ROCr's header and checks with static_assert
 * that every offset and the sizes agree.
 *
 * Each table starts with an ApiTableVersion whose minor_id is the size in
 * bytes of the table the runtime filled: a field exists only when it ends at
 * or before minor_id.
 */
#ifndef KPATCH_HSA_TABLE_H
#define KPATCH_HSA_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* hsa.h types and values the hook needs (same values as hsa.h) */
typedef int kp_status_t;              /* hsa_status_t */
#define KP_STATUS_SUCCESS 0x0
#define KP_STATUS_ERROR_INVALID_CODE_OBJECT 0x1010
typedef struct { uint64_t handle; } kp_reader_t;       /* hsa_code_object_reader_t */
typedef struct { uint64_t handle; } kp_code_object_t;  /* hsa_code_object_t */
typedef int kp_file_t;                                  /* hsa_file_t */

typedef void (*kp_any_fn)(void);
typedef kp_status_t (*kp_deserialize_fn)(void *serialized_code_object, size_t serialized_code_object_size,
                                         const char *options, kp_code_object_t *code_object);
typedef kp_status_t (*kp_reader_from_file_fn)(kp_file_t file, kp_reader_t *code_object_reader);
typedef kp_status_t (*kp_reader_from_memory_fn)(const void *code_object, size_t size,
                                                kp_reader_t *code_object_reader);

/* ApiTableVersion */
struct kp_api_table_version {
  uint32_t major_id;
  uint32_t minor_id; /* the table's size in bytes */
  uint32_t step_id;
  uint32_t reserved;
};

/* CoreApiTable */
struct kp_core_api_table {
  struct kp_api_table_version version;
  kp_any_fn hsa_init_fn;
  kp_any_fn hsa_shut_down_fn;
  kp_any_fn hsa_system_get_info_fn;
  kp_any_fn hsa_system_extension_supported_fn;
  kp_any_fn hsa_system_get_extension_table_fn;
  kp_any_fn hsa_iterate_agents_fn;
  kp_any_fn hsa_agent_get_info_fn;
  kp_any_fn hsa_queue_create_fn;
  kp_any_fn hsa_soft_queue_create_fn;
  kp_any_fn hsa_queue_destroy_fn;
  kp_any_fn hsa_queue_inactivate_fn;
  kp_any_fn hsa_queue_load_read_index_scacquire_fn;
  kp_any_fn hsa_queue_load_read_index_relaxed_fn;
  kp_any_fn hsa_queue_load_write_index_scacquire_fn;
  kp_any_fn hsa_queue_load_write_index_relaxed_fn;
  kp_any_fn hsa_queue_store_write_index_relaxed_fn;
  kp_any_fn hsa_queue_store_write_index_screlease_fn;
  kp_any_fn hsa_queue_cas_write_index_scacq_screl_fn;
  kp_any_fn hsa_queue_cas_write_index_scacquire_fn;
  kp_any_fn hsa_queue_cas_write_index_relaxed_fn;
  kp_any_fn hsa_queue_cas_write_index_screlease_fn;
  kp_any_fn hsa_queue_add_write_index_scacq_screl_fn;
  kp_any_fn hsa_queue_add_write_index_scacquire_fn;
  kp_any_fn hsa_queue_add_write_index_relaxed_fn;
  kp_any_fn hsa_queue_add_write_index_screlease_fn;
  kp_any_fn hsa_queue_store_read_index_relaxed_fn;
  kp_any_fn hsa_queue_store_read_index_screlease_fn;
  kp_any_fn hsa_agent_iterate_regions_fn;
  kp_any_fn hsa_region_get_info_fn;
  kp_any_fn hsa_agent_get_exception_policies_fn;
  kp_any_fn hsa_agent_extension_supported_fn;
  kp_any_fn hsa_memory_register_fn;
  kp_any_fn hsa_memory_deregister_fn;
  kp_any_fn hsa_memory_allocate_fn;
  kp_any_fn hsa_memory_free_fn;
  kp_any_fn hsa_memory_copy_fn;
  kp_any_fn hsa_memory_assign_agent_fn;
  kp_any_fn hsa_signal_create_fn;
  kp_any_fn hsa_signal_destroy_fn;
  kp_any_fn hsa_signal_load_relaxed_fn;
  kp_any_fn hsa_signal_load_scacquire_fn;
  kp_any_fn hsa_signal_store_relaxed_fn;
  kp_any_fn hsa_signal_store_screlease_fn;
  kp_any_fn hsa_signal_wait_relaxed_fn;
  kp_any_fn hsa_signal_wait_scacquire_fn;
  kp_any_fn hsa_signal_and_relaxed_fn;
  kp_any_fn hsa_signal_and_scacquire_fn;
  kp_any_fn hsa_signal_and_screlease_fn;
  kp_any_fn hsa_signal_and_scacq_screl_fn;
  kp_any_fn hsa_signal_or_relaxed_fn;
  kp_any_fn hsa_signal_or_scacquire_fn;
  kp_any_fn hsa_signal_or_screlease_fn;
  kp_any_fn hsa_signal_or_scacq_screl_fn;
  kp_any_fn hsa_signal_xor_relaxed_fn;
  kp_any_fn hsa_signal_xor_scacquire_fn;
  kp_any_fn hsa_signal_xor_screlease_fn;
  kp_any_fn hsa_signal_xor_scacq_screl_fn;
  kp_any_fn hsa_signal_exchange_relaxed_fn;
  kp_any_fn hsa_signal_exchange_scacquire_fn;
  kp_any_fn hsa_signal_exchange_screlease_fn;
  kp_any_fn hsa_signal_exchange_scacq_screl_fn;
  kp_any_fn hsa_signal_add_relaxed_fn;
  kp_any_fn hsa_signal_add_scacquire_fn;
  kp_any_fn hsa_signal_add_screlease_fn;
  kp_any_fn hsa_signal_add_scacq_screl_fn;
  kp_any_fn hsa_signal_subtract_relaxed_fn;
  kp_any_fn hsa_signal_subtract_scacquire_fn;
  kp_any_fn hsa_signal_subtract_screlease_fn;
  kp_any_fn hsa_signal_subtract_scacq_screl_fn;
  kp_any_fn hsa_signal_cas_relaxed_fn;
  kp_any_fn hsa_signal_cas_scacquire_fn;
  kp_any_fn hsa_signal_cas_screlease_fn;
  kp_any_fn hsa_signal_cas_scacq_screl_fn;
  kp_any_fn hsa_isa_from_name_fn;
  kp_any_fn hsa_isa_get_info_fn;
  kp_any_fn hsa_isa_compatible_fn;
  kp_any_fn hsa_code_object_serialize_fn;
  kp_deserialize_fn hsa_code_object_deserialize_fn;
  kp_any_fn hsa_code_object_destroy_fn;
  kp_any_fn hsa_code_object_get_info_fn;
  kp_any_fn hsa_code_object_get_symbol_fn;
  kp_any_fn hsa_code_symbol_get_info_fn;
  kp_any_fn hsa_code_object_iterate_symbols_fn;
  kp_any_fn hsa_executable_create_fn;
  kp_any_fn hsa_executable_destroy_fn;
  kp_any_fn hsa_executable_load_code_object_fn;
  kp_any_fn hsa_executable_freeze_fn;
  kp_any_fn hsa_executable_get_info_fn;
  kp_any_fn hsa_executable_global_variable_define_fn;
  kp_any_fn hsa_executable_agent_global_variable_define_fn;
  kp_any_fn hsa_executable_readonly_variable_define_fn;
  kp_any_fn hsa_executable_validate_fn;
  kp_any_fn hsa_executable_get_symbol_fn;
  kp_any_fn hsa_executable_symbol_get_info_fn;
  kp_any_fn hsa_executable_iterate_symbols_fn;
  kp_any_fn hsa_status_string_fn;
  kp_any_fn hsa_extension_get_name_fn;
  kp_any_fn hsa_system_major_extension_supported_fn;
  kp_any_fn hsa_system_get_major_extension_table_fn;
  kp_any_fn hsa_agent_major_extension_supported_fn;
  kp_any_fn hsa_cache_get_info_fn;
  kp_any_fn hsa_agent_iterate_caches_fn;
  kp_any_fn hsa_signal_silent_store_relaxed_fn;
  kp_any_fn hsa_signal_silent_store_screlease_fn;
  kp_any_fn hsa_signal_group_create_fn;
  kp_any_fn hsa_signal_group_destroy_fn;
  kp_any_fn hsa_signal_group_wait_any_scacquire_fn;
  kp_any_fn hsa_signal_group_wait_any_relaxed_fn;
  kp_any_fn hsa_agent_iterate_isas_fn;
  kp_any_fn hsa_isa_get_info_alt_fn;
  kp_any_fn hsa_isa_get_exception_policies_fn;
  kp_any_fn hsa_isa_get_round_method_fn;
  kp_any_fn hsa_wavefront_get_info_fn;
  kp_any_fn hsa_isa_iterate_wavefronts_fn;
  kp_any_fn hsa_code_object_get_symbol_from_name_fn;
  kp_reader_from_file_fn hsa_code_object_reader_create_from_file_fn;
  kp_reader_from_memory_fn hsa_code_object_reader_create_from_memory_fn;
  kp_any_fn hsa_code_object_reader_destroy_fn;
  kp_any_fn hsa_executable_create_alt_fn;
  kp_any_fn hsa_executable_load_program_code_object_fn;
  kp_any_fn hsa_executable_load_agent_code_object_fn;
  kp_any_fn hsa_executable_validate_alt_fn;
  kp_any_fn hsa_executable_get_symbol_by_name_fn;
  kp_any_fn hsa_executable_iterate_agent_symbols_fn;
  kp_any_fn hsa_executable_iterate_program_symbols_fn;
};

/* HsaApiTable (ROCm 6+ appends more table pointers after image_ext_) */
struct kp_hsa_api_table {
  struct kp_api_table_version version;
  struct kp_core_api_table *core_;
  void *amd_ext_;
  void *finalizer_ext_;
  void *image_ext_;
};

#ifdef __cplusplus
}
#endif

#endif /* KPATCH_HSA_TABLE_H */
