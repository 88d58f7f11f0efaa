/*===- kvrt.h - kvgen runtime: load, validate, launch KV-cache appends
-----===*\
|*                                                                            *|
|* The C ABI of kvrt. It needs no MLIR, no LLVM and no CUDA toolkit: the      *|
|* driver is reached through libcuda.so.1 at run time, so an application      *|
|* links kvrt on a machine without a GPU and gets KVRT_ERROR_NO_DEVICE (with  *|
|* a message) when it tries to launch there.                                  *|
|*                                                                            *|
|* Every call returns a kvrt_status; on failure kvrt_last_error() gives the   *|
|* message of the calling thread's last failure, naming the tensor and the    *|
|* rule it broke. A refused launch has launched nothing and written nothing.  *|
|*                                                                            *|
|* The tensors are DLPack DLTensors. See docs/KERNEL-ABI.md for shapes.       *|
\*===----------------------------------------------------------------------===*/

#ifndef KVRT_KVRT_H
#define KVRT_KVRT_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvrt_status {
  KVRT_SUCCESS = 0,
  KVRT_ERROR_INVALID_ARGUMENT = 1, /* a tensor or argument broke a rule */
  KVRT_ERROR_INVALID_BUNDLE = 2,   /* the bundle or its manifest is malformed */
  KVRT_ERROR_NOT_FOUND = 3,        /* no such kernel, or a driver entry point */
  KVRT_ERROR_NO_DRIVER = 4,        /* libcuda.so.1 could not be loaded */
  KVRT_ERROR_NO_DEVICE = 5,        /* the driver reports no usable device */
  KVRT_ERROR_UNSUPPORTED_DEVICE = 6, /* compute capability below the target */
  KVRT_ERROR_DRIVER = 7,             /* a driver call failed (message has it) */
  KVRT_ERROR_IO = 8,                 /* a file could not be read */
  KVRT_ERROR_INTERNAL = 9,           /* a kvrt bug: please report it */
  KVRT_ERROR_OUT_OF_MEMORY = 10,     /* a host allocation failed */
} kvrt_status;

/* The message of the calling thread's last failed call ("" if none). */
const char *kvrt_last_error(void);

/* The name of a status code, e.g. "KVRT_ERROR_INVALID_BUNDLE". */
const char *kvrt_status_name(kvrt_status status);

/* An opaque stream: a CUstream (or cudaStream_t, the same handle); NULL is
 * the legacy default stream. Ignored for host (kDLCPU) launches. */
typedef void *kvrt_stream;

/* A loaded bundle: the manifest, the PTX/cubin, and, lazily, one loaded module
 * per CUDA context it is launched in. Thread-safe. */
typedef struct kvrt_bundle kvrt_bundle;

kvrt_status kvrt_bundle_load_file(const char *path, kvrt_bundle **out);
kvrt_status kvrt_bundle_load_memory(const void *data, size_t size,
                                    kvrt_bundle **out);
void kvrt_bundle_destroy(kvrt_bundle *bundle);

/* Number of kernels in the bundle and their names (every variant counts). */
size_t kvrt_bundle_num_kernels(const kvrt_bundle *bundle);
const char *kvrt_bundle_kernel_name(const kvrt_bundle *bundle, size_t index);

/* The manifest's kind ("append", "slot_mapping", "fused_append", "gather",
 * "mla_append", "mla_fused_append", "paged_kv_append", "fused_gather") and
 * variant
 * ("vector", "scalar", "wide") of kernel `index`; NULL if out of range. A
 * binding uses them to find the descriptions a bundle offers. */
const char *kvrt_bundle_kernel_kind(const kvrt_bundle *bundle, size_t index);
const char *kvrt_bundle_kernel_variant(const kvrt_bundle *bundle, size_t index);

/* Kernel `index`'s manifest entry as compact JSON (name, kind, variant,
 * cache with its quant, source/output dtype, promise, launch, params), as
 * kvrt parsed it; NULL if out of range. Valid while the bundle lives. */
const char *kvrt_bundle_kernel_manifest(const kvrt_bundle *bundle,
                                        size_t index);

/* The host target: a kernel compiled for the CPU (kvgen's host target), as its
 * packed entry point `void fn(void **params)`. Once registered, a launch whose
 * tensors all live on kDLCPU runs it synchronously through the same validation
 * and argument packing as a GPU launch. */
typedef void (*kvrt_host_kernel)(void **params);
/* `kernel_name` is a full kernel name (any variant); fn NULL unregisters. */
kvrt_status kvrt_bundle_set_host_kernel(kvrt_bundle *bundle,
                                        const char *kernel_name,
                                        kvrt_host_kernel fn);

/* Checked mode, for a developer whose cache looks corrupted: before every
 * append and fused append, kvrt copies slot_mapping (or the block table and
 * positions, or the page table) to the host, synchronizing the stream, and
 * refuses (KVRT_ERROR_INVALID_ARGUMENT, nothing launched) a slot out of
 * range, a slot used by two tokens, a block id past num_blocks, a position
 * past its block-table row or page list, a negative context_lens, a negative
 * or decreasing query_start_loc, a batch index out of range, or, with a fused
 * RoPE prologue, a position outside [0, max_position) of the cos/sin cache
 * (rope_positions, or the fused append's slot-rule position; a padding
 * token's included), naming the first offending token or entry. Slow and not
 * graph-capturable. Off by default; the environment variable KVRT_CHECKED=1
 * turns it on for every bundle loaded. */
kvrt_status kvrt_bundle_set_checked(kvrt_bundle *bundle, int enabled);

/* Programmatic dependent launch (sm_90 and newer, a CUDA 12 driver): a kernel
 * compiled with `kvgen --programmatic-launch` waits (griddepcontrol.wait)
 * before its first load of any input, and its manifest entry says
 * "programmatic_launch": true. With this mode on, kvrt launches such a kernel
 * with cuLaunchKernelEx and CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
 * SERIALIZATION, so that its launch overlaps the tail of the previous kernel
 * in the stream (in a graph too: the capture records a programmatic edge);
 * a kernel that does not wait is launched as before, with cuLaunchKernel,
 * because overlapping it would race with its producer. Enabling the mode on a
 * bundle with no waiting kernel is refused (KVRT_ERROR_INVALID_ARGUMENT); a
 * launch that needs cuLaunchKernelEx on a driver without it fails with
 * KVRT_ERROR_NOT_FOUND, nothing launched. Off by default; the environment
 * variable KVRT_PDL=1 turns it on for every bundle loaded. Host launches
 * ignore it. */
kvrt_status kvrt_bundle_set_programmatic_launch(kvrt_bundle *bundle,
                                                int enabled);

/* Every args struct starts with `size_t struct_size`, which the caller sets
 * to the size of the struct it was compiled with: KVRT_ARGS_INIT(type)
 * initializes one that way, with every other field zero (NULL, AUTO). A later
 * kvrt may add fields at the end of a struct; it reads only the fields that
 * fit in struct_size and takes the others as zero, so a caller compiled
 * against this header keeps working. A struct_size smaller than the struct's
 * first version (the KVRT_*_ARGS_STRUCT_SIZE below) is refused with
 * KVRT_ERROR_INVALID_ARGUMENT, naming the struct. */
#define KVRT_STRUCT_SIZE(type, last_field)                                     \
  (offsetof(type, last_field) + sizeof(((type *)0)->last_field))
#define KVRT_ARGS_INIT(type) {sizeof(type)}

/* Which variant a launch may use. AUTO picks a vector kernel when every
 * tensor meets its alignment promise, else the scalar one; of the vector
 * kernels, the wide one (planned for many tokens: two or four chunks a
 * thread, or for a dynamic scale IEEE division, docs/KERNEL-ABI.md) from its
 * manifest's "min_tokens" on and below its "max_tokens" where it has one,
 * else the vector one. The choice depends on the token count, never on the
 * slots' values, so a captured graph stays valid. */
typedef enum kvrt_variant {
  KVRT_VARIANT_AUTO = 0,
  KVRT_VARIANT_VECTOR = 1, /* refused if a tensor breaks the promise */
  KVRT_VARIANT_SCALAR = 2,
  KVRT_VARIANT_WIDE = 3, /* refused if a tensor breaks the promise */
} kvrt_variant;

/* Append new K/V rows into the cache through `slot_mapping`.
 * `kernel` names the description (its vector variant's name); NULL picks the
 * bundle's only append description. For a stacked layout (K and V in one
 * tensor, docs/KERNEL-ABI.md), `key_cache` is the [num_blocks, 2, ...]
 * tensor and `value_cache` must be NULL.
 *
 * Quantized caches (docs/CONTRACT.md, "Quantization"): fp8 caches are DLPack
 * uint8 or float8 (code 10 e4m3fn, 12 e5m2), int8 caches int8. A static
 * description takes key_scale/value_scale (f32, compact, shape by
 * granularity), a dynamic one key_scale_cache/value_scale_cache (f32,
 * compact, one scale per slot, written); the others must be NULL, and so must
 * all four for an unquantized description.
 *
 * The fused prologue (a description with #kv.prologue<q_heads, norm, rope,
 * rotary_dim>, manifest "prologue"; docs/CONTRACT.md, "The fused prologue"):
 * RMSNorm and RoPE of each K head (and Q head) in fp32 before the cache's
 * quantization and store. The fields after value_scale_cache are its
 * tensors, each required where the description's prologue has its part and
 * NULL otherwise (refused by name either way); a caller built against a
 * header without them (struct_size up to value_scale_cache) launches only
 * descriptions without a prologue.
 *   query, q_out    [num_tokens, q_heads, head_dim], source dtype, any
 *                   strides (q_heads): Q in, and Q normalized and rotated
 *                   out. q_out may be query itself (the same data +
 *                   byte_offset, shape and strides: in place); any other
 *                   overlap with a tensor of the launch is refused.
 *   rope_positions  int64 [num_tokens], contiguous (rope; append and
 *                   paged_kv_append: the fused append takes the slot rule's
 *                   position). A position
 *                   outside [0, max_position) writes nothing for its token
 *                   (no K, V or Q); checked mode refuses it.
 *   cos_sin_cache   [max_position, rotary_dim], source dtype, compact: row p
 *                   is cos then sin (vLLM's) (rope).
 *   k_norm_weight   [head_dim], source dtype, compact (norm).
 *   q_norm_weight   [head_dim], source dtype, compact (norm with q_heads).
 *   epsilon         f32 [1] (norm): RMSNorm's epsilon, read by the kernel.
 *   q_scale         f32 [1] (q_quant = fp8_e4m3): q_out is then fp8 e4m3
 *                   (DLPack float8_e4m3fn or uint8), Q / q_scale saturated
 *                   and rounded; without q_quant q_out has the source dtype.
 *   A description with cos_sin = f32 takes cos_sin_cache in f32 whatever
 *   the source dtype (FlashInfer's). */
typedef struct kvrt_append_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_append_args) */
  const char *kernel;
  const DLTensor *key;
  const DLTensor *value;
  const DLTensor *slot_mapping;
  const DLTensor *key_cache;
  const DLTensor *value_cache;
  kvrt_variant variant;
  const DLTensor *key_scale;
  const DLTensor *value_scale;
  const DLTensor *key_scale_cache;
  const DLTensor *value_scale_cache;
  /* The fused prologue's tensors (above); NULL without a prologue. */
  const DLTensor *query;
  const DLTensor *q_out;
  const DLTensor *rope_positions;
  const DLTensor *cos_sin_cache;
  const DLTensor *k_norm_weight;
  const DLTensor *q_norm_weight;
  const DLTensor *epsilon;
  const DLTensor *q_scale;
} kvrt_append_args;
#define KVRT_APPEND_ARGS_STRUCT_SIZE                                           \
  KVRT_STRUCT_SIZE(kvrt_append_args, value_scale_cache)

kvrt_status kvrt_append(kvrt_bundle *bundle, const kvrt_append_args *args,
                        kvrt_stream stream);

/* K-only caches (cache "k_only", and MLA latent caches): the description has
 * no V, so `value` and `value_cache` (and value_scale, value_scale_cache,
 * value_out) must be NULL; each is refused by name otherwise. */

/* Append into an MLA latent cache (kernel kind mla_append, vLLM's
 * concat_and_cache_mla): slot slot_mapping[t]'s entry of key_cache
 * [num_blocks, block_size, kv_lora_rank + rope_dim] becomes row t of kv_c
 * [num_tokens, kv_lora_rank] followed by row t of k_pe [num_tokens,
 * rope_dim] (each any strides, source_dtype); slot < 0 writes nothing. A
 * static quantized description takes key_scale (per_tensor [1] or
 * per_token [num_tokens]); otherwise it must be NULL.
 *
 * With a RoPE prologue (manifest "prologue" on an MLA kernel; vLLM's
 * concat_and_cache_mla_rope_fused; docs/CONTRACT.md, "The MLA appends'
 * prologue") the fields after key_scale are its tensors, each required where
 * the description takes it and NULL otherwise (refused by name either way):
 *   query, q_out    [num_tokens, q_heads, rope_dim], source dtype, any
 *                   strides (q_heads): vLLM's q_pe in, rotated out. q_out
 *                   may be query itself (in place).
 *   k_pe_out        [num_tokens, rope_dim], source dtype, any strides:
 *                   k_pe rotated, the value the entry stores. It may be
 *                   k_pe itself (in place, vLLM's call).
 *   rope_positions  int64 [num_tokens], contiguous (mla_append only).
 *   cos_sin_cache   [max_position, rope_dim], source dtype, compact.
 * A token with slot < 0 or a position outside [0, max_position) writes
 * nothing: no entry, no q_out or k_pe_out row. */
typedef struct kvrt_mla_append_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_mla_append_args) */
  const char *kernel;
  const DLTensor *kv_c;
  const DLTensor *k_pe;
  const DLTensor *slot_mapping;
  const DLTensor *key_cache;
  kvrt_variant variant;
  const DLTensor *key_scale;
  /* The RoPE prologue's tensors (above); NULL without a prologue. */
  const DLTensor *query;
  const DLTensor *q_out;
  const DLTensor *k_pe_out;
  const DLTensor *rope_positions;
  const DLTensor *cos_sin_cache;
} kvrt_mla_append_args;
#define KVRT_MLA_APPEND_ARGS_STRUCT_SIZE                                       \
  KVRT_STRUCT_SIZE(kvrt_mla_append_args, key_scale)

kvrt_status kvrt_mla_append(kvrt_bundle *bundle,
                            const kvrt_mla_append_args *args,
                            kvrt_stream stream);

/* kvrt_mla_append with the slots of kvrt_fused_append (kernel kind
 * mla_fused_append): token t of request r goes to position
 * context_lens[r] + t - query_start_loc[r] of its block table row; padding
 * tokens and negative block ids write nothing. One launch. */
typedef struct kvrt_mla_fused_append_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_mla_fused_append_args) */
  const char *kernel;
  const DLTensor *kv_c;
  const DLTensor *k_pe;
  const DLTensor *block_table;     /* int32 [num_reqs, max_blocks_per_req] */
  const DLTensor *query_start_loc; /* int32 [num_reqs + 1] */
  const DLTensor *context_lens;    /* int32 [num_reqs] */
  const DLTensor *key_cache;
  kvrt_variant variant;
  const DLTensor *key_scale;
  /* The RoPE prologue's tensors, as in kvrt_mla_append_args; a token's
   * position is the slot rule's, so there is no rope_positions. */
  const DLTensor *query;
  const DLTensor *q_out;
  const DLTensor *k_pe_out;
  const DLTensor *cos_sin_cache;
} kvrt_mla_fused_append_args;
#define KVRT_MLA_FUSED_APPEND_ARGS_STRUCT_SIZE                                 \
  KVRT_STRUCT_SIZE(kvrt_mla_fused_append_args, key_scale)

kvrt_status kvrt_mla_fused_append(kvrt_bundle *bundle,
                                  const kvrt_mla_fused_append_args *args,
                                  kvrt_stream stream);

/* Build slot_mapping from the block table and per-request positions, on the
 * device (kernel kind slot_mapping). */
typedef struct kvrt_slot_mapping_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_slot_mapping_args) */
  const char *kernel;
  const DLTensor *block_table;     /* int32 [num_reqs, max_blocks_per_req] */
  const DLTensor *query_start_loc; /* int32 [num_reqs + 1] */
  const DLTensor *context_lens;    /* int32 [num_reqs] */
  const DLTensor *slot_mapping;    /* int64 [num_tokens], written */
} kvrt_slot_mapping_args;
#define KVRT_SLOT_MAPPING_ARGS_STRUCT_SIZE                                     \
  KVRT_STRUCT_SIZE(kvrt_slot_mapping_args, slot_mapping)

kvrt_status kvrt_build_slot_mapping(kvrt_bundle *bundle,
                                    const kvrt_slot_mapping_args *args,
                                    kvrt_stream stream);

/* Append straight from the block table and positions: one launch. */
typedef struct kvrt_fused_append_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_fused_append_args) */
  const char *kernel;
  const DLTensor *key;
  const DLTensor *value;
  const DLTensor *block_table;
  const DLTensor *query_start_loc;
  const DLTensor *context_lens;
  const DLTensor *key_cache;
  const DLTensor *value_cache;
  kvrt_variant variant;
  /* As in kvrt_append_args. */
  const DLTensor *key_scale;
  const DLTensor *value_scale;
  const DLTensor *key_scale_cache;
  const DLTensor *value_scale_cache;
  /* The fused prologue's tensors, as in kvrt_append_args; a token's
   * position is the slot rule's, so there is no rope_positions. */
  const DLTensor *query;
  const DLTensor *q_out;
  const DLTensor *cos_sin_cache;
  const DLTensor *k_norm_weight;
  const DLTensor *q_norm_weight;
  const DLTensor *epsilon;
  const DLTensor *q_scale;
} kvrt_fused_append_args;
#define KVRT_FUSED_APPEND_ARGS_STRUCT_SIZE                                     \
  KVRT_STRUCT_SIZE(kvrt_fused_append_args, value_scale_cache)

kvrt_status kvrt_fused_append(kvrt_bundle *bundle,
                              const kvrt_fused_append_args *args,
                              kvrt_stream stream);

/* FlashInfer's append_paged_kv_cache in one launch (kernel kind
 * paged_kv_append): token i of key/value goes to position p = positions[i]
 * of request b = batch_indices[i], whose pages are kv_indices[kv_indptr[b]
 * .. kv_indptr[b + 1]): slot kv_indices[kv_indptr[b] + p / block_size] *
 * block_size + p % block_size. The kernel checks every index before it reads
 * the token's K or V: b outside [0, batch_size), p < 0, a kv_indptr range
 * outside kv_indices, a page past the request's last one, a negative page id
 * or one past num_blocks write nothing (checked mode refuses them instead,
 * naming the token). All four index tensors are int32 and contiguous;
 * batch_size is len(kv_indptr) - 1. Scales as in kvrt_append_args. */
typedef struct kvrt_paged_kv_append_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_paged_kv_append_args) */
  const char *kernel;
  const DLTensor *key;
  const DLTensor *value;
  const DLTensor *batch_indices; /* int32 [num_tokens] */
  const DLTensor *positions;     /* int32 [num_tokens] */
  const DLTensor *kv_indices;    /* int32 [num_indices] */
  const DLTensor *kv_indptr;     /* int32 [batch_size + 1] */
  const DLTensor *key_cache;
  const DLTensor *value_cache;
  kvrt_variant variant;
  const DLTensor *key_scale;
  const DLTensor *value_scale;
  const DLTensor *key_scale_cache;
  const DLTensor *value_scale_cache;
  /* The fused prologue's tensors, as in kvrt_append_args: a token rotates
   * at rope_positions[i] (FlashInfer's pos_ids, apart from positions). */
  const DLTensor *query;
  const DLTensor *q_out;
  const DLTensor *rope_positions;
  const DLTensor *cos_sin_cache;
  const DLTensor *k_norm_weight;
  const DLTensor *q_norm_weight;
  const DLTensor *epsilon;
  const DLTensor *q_scale;
} kvrt_paged_kv_append_args;
#define KVRT_PAGED_KV_APPEND_ARGS_STRUCT_SIZE                                  \
  KVRT_STRUCT_SIZE(kvrt_paged_kv_append_args, value_scale_cache)

kvrt_status kvrt_paged_kv_append(kvrt_bundle *bundle,
                                 const kvrt_paged_kv_append_args *args,
                                 kvrt_stream stream);

/* Read rows back out of the cache (kernel kind gather): row i of key_out and
 * value_out ([n, num_kv_heads, head_dim] of the description's output_dtype,
 * any strides) is the cache's slot slot_mapping[i], dequantized
 * (x = float(q) * scale); slot < 0 leaves row i untouched. Scales as in
 * kvrt_append_args; static per_token(_head) scales are indexed by i. */
typedef struct kvrt_gather_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_gather_args) */
  const char *kernel;
  const DLTensor *key_cache;
  const DLTensor *value_cache;
  const DLTensor *slot_mapping; /* int64 [n] */
  const DLTensor *key_out;
  const DLTensor *value_out;
  kvrt_variant variant;
  const DLTensor *key_scale;
  const DLTensor *value_scale;
  const DLTensor *key_scale_cache;
  const DLTensor *value_scale_cache;
} kvrt_gather_args;
#define KVRT_GATHER_ARGS_STRUCT_SIZE                                           \
  KVRT_STRUCT_SIZE(kvrt_gather_args, value_scale_cache)

kvrt_status kvrt_gather(kvrt_bundle *bundle, const kvrt_gather_args *args,
                        kvrt_stream stream);

/* kvrt_gather with the slots of kvrt_fused_append (kernel kind
 * fused_gather): row t of key_out and value_out, a token of request r
 * (query_start_loc[r] <= t < query_start_loc[r + 1]), is the cache row at
 * position context_lens[r] + t - query_start_loc[r] of its block table row,
 * dequantized as kvrt_gather does; padding tokens and negative block ids
 * leave their rows untouched. One launch. */
typedef struct kvrt_fused_gather_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_fused_gather_args) */
  const char *kernel;
  const DLTensor *block_table;     /* int32 [num_reqs, max_blocks_per_req] */
  const DLTensor *query_start_loc; /* int32 [num_reqs + 1] */
  const DLTensor *context_lens;    /* int32 [num_reqs] */
  const DLTensor *key_cache;
  const DLTensor *value_cache;
  const DLTensor *key_out;
  const DLTensor *value_out;
  kvrt_variant variant;
  const DLTensor *key_scale;
  const DLTensor *value_scale;
  const DLTensor *key_scale_cache;
  const DLTensor *value_scale_cache;
} kvrt_fused_gather_args;
#define KVRT_FUSED_GATHER_ARGS_STRUCT_SIZE                                     \
  KVRT_STRUCT_SIZE(kvrt_fused_gather_args, value_scale_cache)

kvrt_status kvrt_fused_gather(kvrt_bundle *bundle,
                              const kvrt_fused_gather_args *args,
                              kvrt_stream stream);

/* Every kind's launch as a list, for a binding that generates its calls
 * instead of spelling one per kind (kvrt.hpp's Bundle::launch, the Python
 * package's extension). A new kind adds its rows here, beside its struct.
 *
 * KVRT_KIND(Kind, args struct, first version's size, entry point, Variant or
 * NoVariant): Kind as include/kvgen/ABI/KernelKinds.def names it; Variant
 * where the struct has a `variant` field.
 * KVRT_KIND_TENSOR(args struct, field, Param): the struct's tensor fields, in
 * struct order; each is the kind's buffer parameter Param
 * (include/kvgen/ABI/Params.def), whose name the field bears. */
#define KVRT_FOR_EACH_KIND(X)                                                  \
  X(Append, kvrt_append_args, KVRT_APPEND_ARGS_STRUCT_SIZE, kvrt_append,       \
    Variant)                                                                   \
  X(SlotMapping, kvrt_slot_mapping_args, KVRT_SLOT_MAPPING_ARGS_STRUCT_SIZE,   \
    kvrt_build_slot_mapping, NoVariant)                                        \
  X(FusedAppend, kvrt_fused_append_args, KVRT_FUSED_APPEND_ARGS_STRUCT_SIZE,   \
    kvrt_fused_append, Variant)                                                \
  X(Gather, kvrt_gather_args, KVRT_GATHER_ARGS_STRUCT_SIZE, kvrt_gather,       \
    Variant)                                                                   \
  X(MlaAppend, kvrt_mla_append_args, KVRT_MLA_APPEND_ARGS_STRUCT_SIZE,         \
    kvrt_mla_append, Variant)                                                  \
  X(MlaFusedAppend, kvrt_mla_fused_append_args,                                \
    KVRT_MLA_FUSED_APPEND_ARGS_STRUCT_SIZE, kvrt_mla_fused_append, Variant)    \
  X(PagedKvAppend, kvrt_paged_kv_append_args,                                  \
    KVRT_PAGED_KV_APPEND_ARGS_STRUCT_SIZE, kvrt_paged_kv_append, Variant)      \
  X(FusedGather, kvrt_fused_gather_args, KVRT_FUSED_GATHER_ARGS_STRUCT_SIZE,   \
    kvrt_fused_gather, Variant)

#define KVRT_KIND_SCALE_TENSORS(X, S)                                          \
  X(S, key_scale, KeyScale)                                                    \
  X(S, value_scale, ValueScale)                                                \
  X(S, key_scale_cache, KeyScaleCache)                                         \
  X(S, value_scale_cache, ValueScaleCache)
#define KVRT_KIND_REQUEST_TENSORS(X, S)                                        \
  X(S, block_table, BlockTable)                                                \
  X(S, query_start_loc, QueryStartLoc)                                         \
  X(S, context_lens, ContextLens)
#define KVRT_FOR_EACH_KIND_TENSOR(X)                                           \
  X(kvrt_append_args, key, Key)                                                \
  X(kvrt_append_args, value, Value)                                            \
  X(kvrt_append_args, slot_mapping, SlotMapping)                               \
  X(kvrt_append_args, key_cache, KeyCache)                                     \
  X(kvrt_append_args, value_cache, ValueCache)                                 \
  KVRT_KIND_SCALE_TENSORS(X, kvrt_append_args)                                 \
  X(kvrt_append_args, query, Query)                                            \
  X(kvrt_append_args, q_out, QOut)                                             \
  X(kvrt_append_args, rope_positions, RopePositions)                           \
  X(kvrt_append_args, cos_sin_cache, CosSinCache)                              \
  X(kvrt_append_args, k_norm_weight, KNormWeight)                              \
  X(kvrt_append_args, q_norm_weight, QNormWeight)                              \
  X(kvrt_append_args, epsilon, Epsilon)                                        \
  X(kvrt_append_args, q_scale, QScale)                                         \
  KVRT_KIND_REQUEST_TENSORS(X, kvrt_slot_mapping_args)                         \
  X(kvrt_slot_mapping_args, slot_mapping, SlotMapping)                         \
  X(kvrt_fused_append_args, key, Key)                                          \
  X(kvrt_fused_append_args, value, Value)                                      \
  KVRT_KIND_REQUEST_TENSORS(X, kvrt_fused_append_args)                         \
  X(kvrt_fused_append_args, key_cache, KeyCache)                               \
  X(kvrt_fused_append_args, value_cache, ValueCache)                           \
  KVRT_KIND_SCALE_TENSORS(X, kvrt_fused_append_args)                           \
  X(kvrt_fused_append_args, query, Query)                                      \
  X(kvrt_fused_append_args, q_out, QOut)                                       \
  X(kvrt_fused_append_args, cos_sin_cache, CosSinCache)                        \
  X(kvrt_fused_append_args, k_norm_weight, KNormWeight)                        \
  X(kvrt_fused_append_args, q_norm_weight, QNormWeight)                        \
  X(kvrt_fused_append_args, epsilon, Epsilon)                                  \
  X(kvrt_fused_append_args, q_scale, QScale)                                   \
  X(kvrt_gather_args, key_cache, KeyCache)                                     \
  X(kvrt_gather_args, value_cache, ValueCache)                                 \
  X(kvrt_gather_args, slot_mapping, SlotMapping)                               \
  X(kvrt_gather_args, key_out, KeyOut)                                         \
  X(kvrt_gather_args, value_out, ValueOut)                                     \
  KVRT_KIND_SCALE_TENSORS(X, kvrt_gather_args)                                 \
  X(kvrt_mla_append_args, kv_c, KvC)                                           \
  X(kvrt_mla_append_args, k_pe, KPe)                                           \
  X(kvrt_mla_append_args, slot_mapping, SlotMapping)                           \
  X(kvrt_mla_append_args, key_cache, KeyCache)                                 \
  X(kvrt_mla_append_args, key_scale, KeyScale)                                 \
  X(kvrt_mla_append_args, query, Query)                                        \
  X(kvrt_mla_append_args, q_out, QOut)                                         \
  X(kvrt_mla_append_args, k_pe_out, KPeOut)                                    \
  X(kvrt_mla_append_args, rope_positions, RopePositions)                       \
  X(kvrt_mla_append_args, cos_sin_cache, CosSinCache)                          \
  X(kvrt_mla_fused_append_args, kv_c, KvC)                                     \
  X(kvrt_mla_fused_append_args, k_pe, KPe)                                     \
  KVRT_KIND_REQUEST_TENSORS(X, kvrt_mla_fused_append_args)                     \
  X(kvrt_mla_fused_append_args, key_cache, KeyCache)                           \
  X(kvrt_mla_fused_append_args, key_scale, KeyScale)                           \
  X(kvrt_mla_fused_append_args, query, Query)                                  \
  X(kvrt_mla_fused_append_args, q_out, QOut)                                   \
  X(kvrt_mla_fused_append_args, k_pe_out, KPeOut)                              \
  X(kvrt_mla_fused_append_args, cos_sin_cache, CosSinCache)                    \
  X(kvrt_paged_kv_append_args, key, Key)                                       \
  X(kvrt_paged_kv_append_args, value, Value)                                   \
  X(kvrt_paged_kv_append_args, batch_indices, BatchIndices)                    \
  X(kvrt_paged_kv_append_args, positions, Positions)                           \
  X(kvrt_paged_kv_append_args, kv_indices, KvIndices)                          \
  X(kvrt_paged_kv_append_args, kv_indptr, KvIndptr)                            \
  X(kvrt_paged_kv_append_args, key_cache, KeyCache)                            \
  X(kvrt_paged_kv_append_args, value_cache, ValueCache)                        \
  KVRT_KIND_SCALE_TENSORS(X, kvrt_paged_kv_append_args)                        \
  X(kvrt_paged_kv_append_args, query, Query)                                   \
  X(kvrt_paged_kv_append_args, q_out, QOut)                                    \
  X(kvrt_paged_kv_append_args, rope_positions, RopePositions)                  \
  X(kvrt_paged_kv_append_args, cos_sin_cache, CosSinCache)                     \
  X(kvrt_paged_kv_append_args, k_norm_weight, KNormWeight)                     \
  X(kvrt_paged_kv_append_args, q_norm_weight, QNormWeight)                     \
  X(kvrt_paged_kv_append_args, epsilon, Epsilon)                               \
  X(kvrt_paged_kv_append_args, q_scale, QScale)                                \
  KVRT_KIND_REQUEST_TENSORS(X, kvrt_fused_gather_args)                         \
  X(kvrt_fused_gather_args, key_cache, KeyCache)                               \
  X(kvrt_fused_gather_args, value_cache, ValueCache)                           \
  X(kvrt_fused_gather_args, key_out, KeyOut)                                   \
  X(kvrt_fused_gather_args, value_out, ValueOut)                               \
  KVRT_KIND_SCALE_TENSORS(X, kvrt_fused_gather_args)

/* Copy whole cache blocks (vLLM's swap_blocks): for each pair (s, d) of
 * block_mapping, block d of dst becomes a copy of block s of src. No kernel:
 * a memcpy per pair on the host, cuMemcpyAsync on `stream` where a cache is
 * on a CUDA device (the other on the host or the same device). Before any
 * byte moves, kvrt checks: each cache is blocks along dimension 0 (cpu,
 * cuda_host or cuda), a block (dimensions 1..) filling its bytes and the
 * next block following it; src and dst blocks of one dtype and one layout
 * (a uint8 cache and a float8 one count as one dtype), block_bytes their
 * size; block_mapping int64 [n, 2] (src block, dst block), contiguous, on
 * the cpu; every block in range; no dst block twice; src and dst share no
 * byte. */
typedef struct kvrt_copy_blocks_args {
  size_t struct_size; /* KVRT_ARGS_INIT(kvrt_copy_blocks_args) */
  const DLTensor *src;
  const DLTensor *dst;
  int64_t block_bytes;
  const DLTensor *block_mapping;
} kvrt_copy_blocks_args;
#define KVRT_COPY_BLOCKS_ARGS_STRUCT_SIZE                                      \
  KVRT_STRUCT_SIZE(kvrt_copy_blocks_args, block_mapping)

kvrt_status kvrt_copy_blocks(const kvrt_copy_blocks_args *args,
                             kvrt_stream stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVRT_KVRT_H */
