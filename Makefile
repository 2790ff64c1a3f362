# dashd - the one entry point of the build. Everything built lands in build/.
#
#   make            libraries, dashctl, tests, examples (CUDA parts when nvcc is found)
#   make test       CPU test suites (CUnit), then the Python binding's (pytest, in .venv)
#   make venv       .venv: PyTorch 2, numpy, pytest from PyPI (make test makes it too)
#   make torch-op   the Python binding's native op against the venv's torch (or TORCH_DIR)
#   make test-gpu   GPU test suites; they skip, saying so, where no GPU is usable
#   make spills     every CUDA kernel's registers and spill bytes (make test checks them)
#   make bench      CPU engine and daemon benchmarks, recorded under bench/results/
#   make demo       dashd + a client: forward and backward on random data, checked bit for bit
#   make fuzz       libFuzzer over request decoding and validation (clang), FUZZ_SECONDS long
#   make asan       the CPU suites built with ASan+UBSan into build-asan/ (what CI runs)
#   make tsan       the daemon's concurrency suites built with TSan into build-tsan/
#   make install    PREFIX=/usr/local DESTDIR= (programs, libdash, dash.h, dash.pc, units, man)
#   make clean
#
# Knobs: OPT (optimisation flags; -O3 because gcc 12 vectorises the engine's inner loops
# only there - they sum nothing out of order, so the bits do not depend on it beyond the
# build id), CUDA=0 (skip CUDA parts), BUILD=dir (build there instead of build/; `make test`
# runs that folder's dashd and libdash), VENV=dir (the Python tests' environment, default
# .venv), PYTHON=interpreter (run them with another that has torch >= 2.4), V=1 (show commands).
#
# With nvcc, dashd gets the CUDA backend (the kernels linked in) and libdash its CUDA
# buffers; both are compiled with -DDASH_HAVE_CUDA and link the CUDA runtime STATICALLY,
# never libcuda (driver functions come through cudaGetDriverEntryPoint), so every binary
# still runs on a machine without libcudart, a driver or a GPU.

OPT ?= -O3
V ?= 0
CUDA ?= auto
PREFIX ?= /usr/local
BUILD ?= build
# libdash's version: the real name libdash.so.$(VERSION), soname libdash.so.$(SOVERSION).
VERSION := 0.1.0
SOVERSION := 0
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d

CC ?= cc
ifeq ($(origin CC),default)
CC := gcc
endif
GEN := $(BUILD)/gen
PKGS := libzmq libuv libprotobuf-c libsystemd libxxhash libmicrohttpd
# Deferred (=), so they are read after `deps` has installed the packages on a fresh machine.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(or $(shell pkg-config --libs $(PKGS) 2>/dev/null),-lzmq -luv -lprotobuf-c -lsystemd -lxxhash -lmicrohttpd)
CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(OPT) -pthread -fPIC -MMD -MP \
	$(call inc_flags,$(PART)) -I$(GEN) $(PKG_CFLAGS) $(CUDA_CFLAGS) $(OBJ_EXTRA_CFLAGS)
LDLIBS := -lm -pthread
# Extra flags for the kernels' objects: EXTRA_CFLAGS unless said otherwise (make tsan leaves
# the kernels uninstrumented).
ifeq ($(origin KERNELS_EXTRA_CFLAGS),undefined)
KERNELS_EXTRA_CFLAGS := $(EXTRA_CFLAGS)
endif
OBJ_EXTRA_CFLAGS = $(EXTRA_CFLAGS)
$(BUILD)/obj/kernels/%: OBJ_EXTRA_CFLAGS = $(KERNELS_EXTRA_CFLAGS)

ifeq ($(V),1)
Q :=
else
Q := @
endif

# ---- CUDA -------------------------------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null)
ifeq ($(CUDA),0)
NVCC :=
endif
ifneq ($(NVCC),)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS = -std=c++17 -O2 -g -MMD -MP -Xcompiler -Wall,-Wextra,-Werror $(call inc_flags,$(PART)) \
	-gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80
CUDA_CFLAGS := -DDASH_HAVE_CUDA -I$(CUDA_HOME)/include
# The static runtime: no libcudart.so needed where the binaries run. It finds libcuda.so.1
# with dlopen at the first CUDA call, and reports "no driver" when there is none.
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
endif

# ---- fuzzing (clang's libFuzzer; skipped where clang is missing) ----------------------------
# tests/fuzz_request.c over wire decoding and daemon/validate.c, those compiled by clang with
# the fuzzer, ASan and UBSan; the CPU kernels (the engine's checks) link in uninstrumented.
FUZZ_CC ?= $(shell command -v clang 2>/dev/null)
FUZZ_SECONDS ?= 600
FUZZ_TEST_SECONDS ?= 30
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -fno-omit-frame-pointer -MMD -MP \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -I$(GEN) $(PKG_CFLAGS)
FUZZ_SRC := tests/fuzz_request.c daemon/validate.c proto/wire.c proto/errors.c $(GEN)/proto/dash.pb-c.c
FUZZ := $(if $(FUZZ_CC),$(BUILD)/fuzz_request)

# ---- which part may include which (docs/architecture.md) ----------------------------------
# Every #include names a path from the repository root ("kernels/sched/sched.h"), and each
# part of the tree compiles against an include root of its own, $(BUILD)/inc/PART/, that
# holds links to the folders it may use and nothing else: a forbidden include does not
# compile. Parts not listed (tests, bench, examples) may use everything (the root itself).
INC_sched := kernels/sched
INC_attn := kernels/sched kernels/attn
INC_cpu := kernels/sched kernels/attn kernels/cpu
INC_cuda := kernels/sched kernels/attn kernels/cuda kernels/digest
INC_digest := kernels/digest
INC_proto := proto
INC_libdash := proto client
INC_dashctl := proto client kernels/sched
INC_daemon := proto kernels daemon
PARTS := sched attn cpu cuda digest proto libdash dashctl daemon
$(BUILD)/obj/kernels/sched/%: PART := sched
$(BUILD)/obj/kernels/attn/%: PART := attn
$(BUILD)/obj/kernels/cpu/%: PART := cpu
$(BUILD)/obj/kernels/cuda/%: PART := cuda
$(BUILD)/obj/kernels/digest/%: PART := digest
$(BUILD)/obj/proto/%: PART := proto
$(BUILD)/obj/client/%: PART := libdash
$(BUILD)/obj/client/dashctl/%: PART := dashctl
$(BUILD)/obj/daemon/%: PART := daemon
inc_flags = $(if $(1),-I$(BUILD)/inc/$(1),-I.)
INC_STAMPS := $(foreach p,$(PARTS),$(BUILD)/inc/$(p)/.made)
.SECONDARY: $(INC_STAMPS)
# A part's root: a link per allowed folder, at the same path as in the tree.
$(BUILD)/inc/%/.made: Makefile
	$(Q)rm -rf $(dir $@) && mkdir -p $(dir $@)
	$(Q)for d in $(INC_$*); do mkdir -p $(dir $@)$$(dirname $$d) && \
		ln -s $(abspath .)/$$d $(dir $@)$$d; done
	$(Q)touch $@

# ---- sources ------------------------------------------------------------------------------
# (kernels/cuda/attn_auto.c, the CUDA backend's `auto`, is plain C: here, so the CPU suites
# test it and every binary with the CUDA kernels gets it from this library.)
KERNELS_SRC := kernels/sched/sched.c kernels/sched/dag.c kernels/attn/dtype.c kernels/attn/problem.c \
	kernels/attn/ref.c kernels/cpu/pool.c kernels/cpu/engine.c kernels/cpu/engine_bwd.c kernels/cpu/engine_f64.c \
	kernels/digest/digest.c kernels/cuda/attn_auto.c
PROTO_GEN := $(GEN)/proto/dash.pb-c.c $(GEN)/proto/audit.pb-c.c
PROTO_SRC := proto/errors.c proto/wire.c proto/crc32c.c proto/auditfile.c $(PROTO_GEN)
DAEMON_SRC := daemon/main.c daemon/log.c daemon/lockfile.c daemon/guard.c daemon/shmbuf.c \
	daemon/validate.c daemon/backend_cpu.c daemon/job.c daemon/queue.c daemon/session.c daemon/proc.c \
	daemon/evring.c daemon/audit.c daemon/server.c daemon/dispatch.c daemon/dispatch_op.c \
	daemon/notify.c daemon/warmup.c daemon/limits.c daemon/config.c daemon/memcap.c \
	daemon/metrics.c daemon/metrics_http.c \
	$(if $(NVCC),daemon/backend_cuda.c daemon/backend_cuda_pending.c)
# dashd alone reads a config file (inih, Debian's libinih-dev).
DASHD_LIBS := -linih
LIBDASH_SRC := client/libdash.c client/dash_connect.c client/dash_map.c client/dash_shm.c \
	client/dash_ops.c client/dash_cuda.c client/dash_signal.c client/dash_reach.c \
	client/dash_poison.c
DASHCTL_SRC := client/dashctl/dashctl.c client/dashctl/ctl_sched.c client/dashctl/ctl_daemon.c \
	client/dashctl/ctl_ping.c client/dashctl/ctl_stats.c client/dashctl/ctl_status.c \
	client/dashctl/ctl_audit.c client/dashctl/ctl_audit_diff.c
TEST_SRC := tests/run_tests.c tests/testutil.c tests/test_errors.c tests/test_sched.c \
	tests/test_dag.c tests/test_attn_auto.c tests/test_dtype.c tests/test_engine.c tests/test_varlen.c tests/test_dashctl.c \
	tests/test_wire.c tests/harness.c tests/test_dashd.c tests/test_dashd_varlen.c tests/test_libdash.c tests/test_client.c \
	tests/test_validate.c tests/test_shmbuf.c tests/test_session.c tests/test_job.c \
	tests/test_digest.c tests/test_audit.c tests/test_audit_file.c tests/test_server.c tests/test_endpoint.c tests/churn.c \
	tests/test_notify.c tests/test_reach.c tests/test_limits.c tests/test_config.c \
	tests/test_metrics.c tests/test_log.c tests/test_soak.c tests/soak.c \
	daemon/validate.c daemon/backend_cpu.c daemon/shmbuf.c daemon/guard.c daemon/session.c \
	daemon/proc.c daemon/evring.c daemon/job.c daemon/log.c daemon/limits.c daemon/audit.c
BENCH_SRC := bench/bench_engine.c bench/benchmeta.c bench/benchrng.c bench/benchtime.c
BENCH_VARLEN_SRC := bench/bench_varlen.c bench/benchmeta.c bench/benchrng.c
BENCH_DAEMON_SRC := bench/bench_daemon.c bench/benchd.c bench/benchmeta.c bench/benchrng.c bench/benchtime.c
BENCH_FAIR_SRC := bench/bench_fair.c bench/benchd.c bench/benchmeta.c bench/benchtime.c
BENCH_PING_SRC := bench/bench_ping.c bench/benchd.c bench/benchmeta.c bench/benchtime.c
BENCH_SOAK_SRC := bench/bench_soak.c bench/benchmeta.c tests/soak.c tests/harness.c tests/testutil.c
BENCH_CHURN_SRC := bench/bench_churn.c bench/benchmeta.c tests/churn.c tests/harness.c \
	tests/testutil.c
DEMO_SRC := examples/engine_demo.c
DEMO_CLIENT_SRC := examples/demo_client.c
CUDA_KERNELS_CU := kernels/cuda/attn_cuda.cu kernels/cuda/attn_fwd.cu kernels/cuda/attn_bwd.cu \
	kernels/cuda/attn_fwd_tc.cu kernels/cuda/attn_fwd_wg.cu kernels/cuda/attn_bwd_tc.cu \
	kernels/cuda/attn_vl.cu kernels/cuda/attn_pad.cu kernels/digest/digest_cuda.cu
GPU_TEST_CU := tests/gpu/test_sched_device.cu tests/gpu/gpu_delay.cu $(CUDA_KERNELS_CU)
GPU_TEST_SRC := tests/gpu/run_gpu_tests.c tests/gpu/gpu_bufs.c tests/gpu/test_attn_gpu.c tests/gpu/test_attn_vl_gpu.c \
	tests/gpu/test_dashd_gpu.c tests/gpu/test_dashd_stream_gpu.c tests/gpu/test_dashd_requests_gpu.c \
	tests/gpu/test_share_gpu.c tests/gpu/test_digest_gpu.c tests/gpu/test_audit_gpu.c \
	tests/testutil.c tests/harness.c

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
cuobj = $(patsubst %,$(BUILD)/obj/%.o,$(1))
# The kernels dashd's CUDA backend runs (none without nvcc).
DASHD_CUDA_OBJ := $(if $(NVCC),$(call cuobj,$(CUDA_KERNELS_CU)))

LIBKERNELS := $(BUILD)/libdashkernels.a
LIBPROTO := $(BUILD)/libdashproto.a
LIBDASH_A := $(BUILD)/libdash.a
LIBDASH_SO := $(BUILD)/libdash.so
DASHD := $(BUILD)/dashd
DASHCTL := $(BUILD)/dashctl
TESTS := $(BUILD)/test_dash
BENCH := $(BUILD)/bench_engine
BENCH_VARLEN := $(BUILD)/bench_varlen
BENCH_DAEMON := $(BUILD)/bench_daemon
BENCH_CHURN := $(BUILD)/bench_churn
BENCH_FAIR := $(BUILD)/bench_fair
BENCH_PING := $(BUILD)/bench_ping
BENCH_SOAK := $(BUILD)/bench_soak
DEMO := $(BUILD)/engine_demo
DEMO_CLIENT := $(BUILD)/demo_client
UNIT_SECCOMP := $(BUILD)/unit_seccomp
GPU_TESTS := $(if $(NVCC),$(BUILD)/test_dash_gpu)
BENCH_GPU := $(if $(NVCC),$(BUILD)/bench_gpu $(BUILD)/bench_gpu_daemon $(BUILD)/bench_gpu_handoff \
	$(BUILD)/bench_audit $(BUILD)/libdash_inproc.so)

# Man pages: written in scdoc (docs/man/*.scd), turned into roff here.
MAN_SRC := docs/man/dashd.8.scd docs/man/dashctl.1.scd docs/man/libdash.3.scd
# In man's layout (build/man/man8/dashd.8), so MANPATH=build/man finds them.
MANPAGES := $(BUILD)/man/man8/dashd.8 $(BUILD)/man/man1/dashctl.1 $(BUILD)/man/man3/libdash.3

FUZZ_SEEDS := $(BUILD)/fuzz_seeds
ALL := $(FUZZ_SEEDS) $(FUZZ) $(LIBKERNELS) $(LIBPROTO) $(LIBDASH_A) $(LIBDASH_SO) $(DASHD) $(DASHCTL) $(TESTS) \
	$(BENCH) $(BENCH_VARLEN) $(BENCH_DAEMON) $(BENCH_CHURN) $(BENCH_FAIR) $(BENCH_PING) $(BENCH_SOAK) $(DEMO) $(DEMO_CLIENT) \
	$(UNIT_SECCOMP) $(GPU_TESTS) $(BENCH_GPU) $(MANPAGES)

.PHONY: all deps venv torch-op test test-gpu test-install bench demo install clean help fuzz asan tsan spills
all: deps $(ALL)

help:
	@sed -n '2,20p' Makefile

# The pictures of docs/architecture.md, drawn from the code's #includes by
# scripts/arch_graph.py: the parts (the include roots above) and the modules. Needs
# Graphviz (`apt-get install graphviz`); the .dot and .svg files are checked in.
.PHONY: docs
docs:
	$(Q)for g in parts modules; do \
		python3 scripts/arch_graph.py $$([ $$g = parts ] && echo --parts) > docs/architecture-$$g.dot && \
		dot -Tsvg docs/architecture-$$g.dot -o docs/architecture-$$g.svg || exit 1; done
	@echo "  DOCS    docs/architecture-parts.svg docs/architecture-modules.svg"

# Installs missing Debian packages when run as root, else prints the apt-get line.
deps:
	$(Q)bash scripts/deps.sh

# protoc-c writes the C for proto/dash.proto under $(GEN)/proto/; every object waits for it
# (order-only), since proto/wire.h includes the generated header.
$(GEN)/proto/dash.pb-c.c $(GEN)/proto/dash.pb-c.h: proto/dash.proto | deps
	@mkdir -p $(GEN)
	@$(if $(filter 1,$(V)),,echo "  PROTOC  $<")
	$(Q)protoc-c --c_out=$(GEN) $<

# The build id audit records carry: the commit, "+dirty" when kernels/ or daemon/ differ
# from it. Rewritten only when it changes, so it rebuilds what includes it only then.
BUILD_ID := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- kernels daemon 2>/dev/null || echo +dirty)
$(GEN)/buildid.h: FORCE
	@mkdir -p $(GEN)
	@echo '#define DASH_BUILD_ID "$(BUILD_ID)"' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@
	@rm -f $@.tmp
.PHONY: FORCE
FORCE:

# audit.proto imports proto/dash.proto (paths from the repository root).
$(GEN)/proto/audit.pb-c.c $(GEN)/proto/audit.pb-c.h: proto/audit.proto proto/dash.proto | deps
	@mkdir -p $(GEN)
	@$(if $(filter 1,$(V)),,echo "  PROTOC  $<")
	$(Q)protoc-c --c_out=$(GEN) $<

# The error table, defined once in the installed header: proto/errors.h includes this copy
# (proto/ may include nothing from client/), DASH_ERROR_TABLE renamed DASH_ERRNO_MAP.
$(GEN)/proto/error_table.h: client/dash.h
	@mkdir -p $(dir $@)
	$(Q)awk '/^#define DASH_ERROR_TABLE\(X\)/ { on = 1; sub(/DASH_ERROR_TABLE/, "DASH_ERRNO_MAP") } \
		on { print } on && !/\\$$/ { exit }' $< > $@.tmp && \
		grep -q 'DASH_ERRNO_MAP' $@.tmp && mv $@.tmp $@

# Every compile waits for deps (order-only): with make -j, the packages it installs and the
# pkg-config flags read after it must be there before the first compile starts.
$(BUILD)/obj/%.o: %.c | deps $(GEN)/proto/dash.pb-c.h $(GEN)/proto/audit.pb-c.h $(GEN)/proto/error_table.h \
		$(GEN)/buildid.h $(INC_STAMPS)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(V)),,echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# ptxas's report of each kernel (registers, spills) goes to $@.ptxas, for the spill check
# (scripts/ptxas_spills.py); everything else nvcc says is shown as usual.
$(BUILD)/obj/%.cu.o: %.cu | deps $(INC_STAMPS)
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(V)),,echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -Xptxas -v -c $< -o $@ 2> $@.ptxas; rc=$$?; \
		{ grep -v -E '^ptxas info|^    [0-9]+ bytes stack frame' $@.ptxas >&2 || true; }; exit $$rc

$(LIBKERNELS): $(call obj,$(KERNELS_SRC))
	@$(if $(filter 1,$(V)),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIBPROTO): $(call obj,$(PROTO_SRC))
	@$(if $(filter 1,$(V)),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# libdash: the client library, static and shared, carrying the proto/ code it needs.
$(LIBDASH_A): $(call obj,$(LIBDASH_SRC)) $(call obj,$(PROTO_SRC))
	@$(if $(filter 1,$(V)),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

# The static CUDA runtime inside libdash.so stays private (--exclude-libs): a program that
# also loads libcudart.so must keep calling its own. client/libdash.map exports dash_* only.
$(LIBDASH_SO): $(call obj,$(LIBDASH_SRC)) $(call obj,$(PROTO_SRC))
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-soname,libdash.so.0 -Wl,--version-script=client/libdash.map -Wl,--exclude-libs,ALL -o $@ $^ \
		$(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)
	$(Q)ln -sf libdash.so $(BUILD)/libdash.so.0 # what programs linked with -Lbuild -ldash look for

define man_rule
$(BUILD)/man/man$(1)/%.$(1): docs/man/%.$(1).scd | deps
	@mkdir -p $$(dir $$@)
	@$$(if $$(filter 1,$$(V)),,echo "  SCDOC   $$<")
	$$(Q)scdoc < $$< > $$@
endef
$(foreach s,1 3 8,$(eval $(call man_rule,$(s))))

$(DASHD): $(call obj,$(DAEMON_SRC)) $(DASHD_CUDA_OBJ) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(DASHD_LIBS) $(PKG_LIBS) $(CUDA_LIBS) $(if $(NVCC),-lstdc++) $(LDLIBS)

$(DASHCTL): $(call obj,$(DASHCTL_SRC)) $(LIBDASH_A) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(TESTS): $(call obj,$(TEST_SRC)) $(LIBDASH_A) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcunit $(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(FUZZ_SEEDS): $(call obj,tests/fuzz_seeds.c) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(LDLIBS)

$(BUILD)/fuzz/%.o: % | deps $(GEN)/proto/dash.pb-c.h
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(V)),,echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(BUILD)/fuzz_request: $(patsubst %,$(BUILD)/fuzz/%.o,$(FUZZ_SRC)) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $^ $(PKG_LIBS) -lm -pthread

$(BENCH): $(call obj,$(BENCH_SRC)) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_VARLEN): $(call obj,$(BENCH_VARLEN_SRC)) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BENCH_DAEMON): $(call obj,$(BENCH_DAEMON_SRC)) $(LIBDASH_A) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(BENCH_SOAK): $(call obj,$(BENCH_SOAK_SRC)) $(LIBDASH_A) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(BENCH_PING): $(call obj,$(BENCH_PING_SRC)) $(LIBDASH_A) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(BENCH_FAIR): $(call obj,$(BENCH_FAIR_SRC)) $(LIBDASH_A) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)

$(BENCH_CHURN): $(call obj,$(BENCH_CHURN_SRC)) $(LIBPROTO) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(LDLIBS)

$(DEMO): $(call obj,$(DEMO_SRC)) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(DEMO_CLIENT): $(call obj,$(DEMO_CLIENT_SRC)) $(LIBDASH_A) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(PKG_LIBS) $(CUDA_LIBS) $(LDLIBS)

# The seccomp filter of the units' system-call directives, for running their services by
# hand where no systemd is there (scripts/unit_sandbox.py: make test-install, and
# scripts/gpu_node_check.py on a GPU machine).
$(UNIT_SECCOMP): $(call obj,tests/unit_seccomp.c)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lseccomp

# The GPU runner: the kernels in-process, and (test_dashd_gpu.c, test_dashd_stream_gpu.c,
# test_dashd_requests_gpu.c) a real dashd, which it finds next to itself, driven through
# libdash and the raw protocol (harness.c).
# Our kernels on the GPU; scripts/gpu_bench.sh runs it beside PyTorch's SDPA and cuDNN's.
$(BUILD)/bench_gpu: $(call obj,bench/bench_gpu.c bench/benchtime.c) $(call cuobj,$(CUDA_KERNELS_CU)) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CUDA_LIBS) -lstdc++ $(LDLIBS)

# Issue 20's what-if (bench/step_inproc.py): the kernels in the trainer's own process and
# context, as a shared library for Python; bench only.
$(BUILD)/libdash_inproc.so: $(call obj,bench/inproc.c) $(call cuobj,$(CUDA_KERNELS_CU)) $(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) -shared -o $@ $^ $(CUDA_LIBS) -lstdc++ $(LDLIBS)

# What the audit's digests add to the backward, part by part, in process (issue 16 item 4).
$(BUILD)/bench_audit: $(call obj,bench/bench_audit.c bench/benchmeta.c bench/benchrng.c bench/benchtime.c) $(call cuobj,$(CUDA_KERNELS_CU)) \
		$(LIBKERNELS)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CUDA_LIBS) -lstdc++ $(LDLIBS)

# dashd on the GPU vs the kernels in process (the daemon overhead target of issue 4).
$(BUILD)/bench_gpu_daemon: $(call obj,bench/bench_gpu_daemon.c bench/benchd.c bench/benchtime.c) $(call cuobj,$(CUDA_KERNELS_CU) tests/gpu/gpu_delay.cu) \
		$(LIBDASH_A) $(LIBKERNELS) | $(DASHD)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $(filter-out $(DASHD),$^) $(PKG_LIBS) $(CUDA_LIBS) -lstdc++ $(LDLIBS)

# Two processes passing work by interprocess events, without dashd: the floor under its
# per-op overhead.
$(BUILD)/bench_gpu_handoff: $(call obj,bench/bench_gpu_handoff.c bench/benchtime.c) $(call cuobj,tests/gpu/gpu_delay.cu)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CUDA_LIBS) -lstdc++ $(LDLIBS)

$(BUILD)/test_dash_gpu: $(call cuobj,$(GPU_TEST_CU)) $(call obj,$(GPU_TEST_SRC)) $(LIBDASH_A) $(LIBKERNELS) $(LIBPROTO) | $(DASHD)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcunit $(PKG_LIBS) $(CUDA_LIBS) -lstdc++ $(LDLIBS)

# The Python binding's tests run on a current PyTorch 2 from PyPI, in a virtual environment
# ($(VENV), git-ignored) that Debian's python3 (python3-venv, from deps.sh) makes and pip
# fills from client/python/requirements-test.txt on first use; it is reused until that file
# changes (the copy in $(VENV)/.dash-requirements says what it holds). PYTHON=... runs the
# tests with another interpreter that has torch >= 2.4, numpy and pytest instead.
VENV ?= .venv
VENV_BASE ?= /usr/bin/python3
PY_REQS := client/python/requirements-test.txt
VENV_STAMP := $(VENV)/.dash-requirements
PYTHON ?= $(VENV)/bin/python
PY_ENV := $(if $(filter $(VENV)/bin/python,$(PYTHON)),$(VENV_STAMP))

$(VENV_STAMP): $(PY_REQS) | deps
	@echo "  VENV    $(VENV): PyTorch and the test tools from PyPI ($(PY_REQS)); a few minutes the first time"
	$(Q)$(VENV_BASE) -m venv $(VENV)
	$(Q)$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r $(PY_REQS)
	$(Q)cp $(PY_REQS) $@

venv: $(VENV_STAMP)

# The Python binding's native op (client/torch/dash_torch.h): one C++ autograd node per
# eager call on CUDA tensors. Built against a torch package directory - TORCH_DIR, else the
# torch of $(PYTHON) - into $(BUILD)/libdash_torch_<its version>.so, which the binding
# loads beside libdash when its torch is that version (the ABI is the version's). Needs
# a torch with CUDA (libc10_cuda) and the CUDA headers; skipped, saying why, without them.
# (The C++ ABI: the python's torch says which; with TORCH_DIR, the C++11 one, PyPI's
# since torch 2.7. torch 2.15's headers need C++20.)
TORCH_OP_SRC := client/torch/dash_torch.cpp
torch-op: $(LIBDASH_SO) $(PY_ENV)
	$(Q)dir="$(TORCH_DIR)" abi=1; [ -n "$$dir" ] || { dir=$$($(PYTHON) -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null); \
		abi=$$($(PYTHON) -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null || echo 1); }; \
	if [ -z "$$dir" ] || [ ! -e "$$dir/lib/libc10_cuda.so" ] || [ -z "$(NVCC)" ]; then \
		echo "torch-op: skipped: $${dir:-no torch}: needs a torch with CUDA and nvcc's headers"; exit 0; fi; \
	ver=$$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$$dir/version.py"); out=$(BUILD)/libdash_torch_$$ver.so; \
	for f in $(TORCH_OP_SRC) client/torch/dash_torch.h client/dash.h $(LIBDASH_SO); do [ "$$out" -nt "$$f" ] || stale=1; done; \
	[ -n "$$stale" ] || exit 0; \
	echo "  CXX     $$out (torch $$dir)"; \
	$(CXX) -std=c++20 -O2 -fPIC -shared -D_GLIBCXX_USE_CXX11_ABI=$$abi -Wall -Wextra -Werror -I. \
		-isystem "$$dir/include" -isystem "$$dir/include/torch/csrc/api/include" -isystem $(CUDA_HOME)/include \
		-o "$$out" $(TORCH_OP_SRC) -L"$$dir/lib" -lc10 -lc10_cuda -ltorch_cpu \
		-L$(BUILD) -ldash -Wl,-rpath,'$$ORIGIN'

# Builds everything first, so the CUDA sources are compiled (where nvcc is) even though the
# CPU suites do not run them. The test runner finds dashctl next to itself (build/).
# One fuzz run: seeds fresh from fuzz_seeds, the corpus kept in $(BUILD)/fuzz/corpus between
# runs, a crashing input saved as $(BUILD)/fuzz/crash-*; the log's tail is shown on failure.
fuzz_run = mkdir -p $(BUILD)/fuzz/corpus $(BUILD)/fuzz/seeds && \
	./$(FUZZ_SEEDS) $(BUILD)/fuzz/seeds > /dev/null && \
	if ./$(BUILD)/fuzz_request -max_total_time=$(1) -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix=$(BUILD)/fuzz/ -print_final_stats=1 $(BUILD)/fuzz/corpus $(BUILD)/fuzz/seeds \
		> $(BUILD)/fuzz/log 2>&1; then \
		echo "fuzz: $$(grep -o 'stat::number_of_executed_units: *[0-9]*' $(BUILD)/fuzz/log | \
		grep -o '[0-9]*$$') requests decoded and validated in $(1) s: no crash, no sanitizer report"; \
	else tail -n 40 $(BUILD)/fuzz/log; echo "fuzz: FAILED (log $(BUILD)/fuzz/log)"; exit 1; fi

test: deps all $(PY_ENV) torch-op
	$(Q)./$(TESTS)
	$(Q)bash tests/emu/run.sh # the digest's device-only arithmetic, emulated on the CPU
ifneq ($(NVCC),)
	$(Q)$(PYTHON) scripts/ptxas_spills.py $(BUILD)/obj
endif
ifneq ($(FUZZ),)
	$(Q)$(call fuzz_run,$(FUZZ_TEST_SECONDS))
else
	@echo "fuzz: skipped: clang not found"
endif
	$(Q)$(MAKE) --no-print-directory test-install
	$(Q)for t in bench/test_gpu_report.py bench/test_gpu_plots.py bench/test_gpu_ab.py bench/test_cudnn_peers.py bench/test_bench_gpu.py bench/test_varlen_peers.py bench/test_dashd_proc.py scripts/test_unit_sandbox.py scripts/test_auto_table.py scripts/test_ptxas_spills.py scripts/test_pyflakes.py; do DASHD=$(abspath $(DASHD)) $(PYTHON) $$t || exit 1; done
	$(Q)DASHD=$(abspath $(DASHD)) DASH_LIBRARY=$(abspath $(LIBDASH_SO)) \
		$(PYTHON) -m pytest -q -p no:cacheprovider client/python/tests

# A GPU machine may have no network for pip: the venv's python when there is one, else the
# python3 on PATH (which must have torch >= 2.4 and pytest).
GPU_PYTHON ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)

spills: all
ifeq ($(NVCC),)
	@echo "spills: nothing to check: nvcc not found (or CUDA=0)"
else
	$(Q)$(or $(wildcard $(PYTHON)),python3) scripts/ptxas_spills.py $(BUILD)/obj --list
endif

test-gpu: deps $(GPU_TESTS)
ifeq ($(NVCC),)
	@echo "test-gpu: skipped: nvcc not found (or CUDA=0), so no GPU tests were built"
else
	$(Q)./$(BUILD)/test_dash_gpu
	$(Q)DASHD=$(abspath $(DASHD)) DASH_LIBRARY=$(abspath $(LIBDASH_SO)) DASH_TEST_BACKEND=cuda \
		$(GPU_PYTHON) -m pytest -q -p no:cacheprovider client/python/tests/test_gpu.py
endif

# On a machine with a GPU (and a CUDA build), also the GPU benchmarks: the kernels against
# PyTorch SDPA (needs python3 with torch) and cuDNN's own SDPA (the cuDNN frontend, where
# installed or its wheel is in .gpu/wheels: scripts/gpu_wheels.sh; skipped with a note in
# the report otherwise), dashd's overhead with and without auditing, what the audit adds to
# the backward part by part (bench_audit), and the cross-process
# hand-off floor under it (as the machine is set up: with MPS if dashd and this shell run
# under it; scripts/gpu_mps_bench.sh compares both, docs/mps.md).
bench: deps $(BENCH) $(BENCH_VARLEN) $(BENCH_DAEMON) $(BENCH_CHURN) $(BENCH_FAIR) $(BENCH_PING) $(BENCH_SOAK) $(DASHD) $(BENCH_GPU) $(LIBDASH_SO)
	@mkdir -p bench/results
	$(Q)$(MAKE) --no-print-directory torch-op PY_ENV= # the native op, where $(PYTHON) has torch with CUDA
	$(Q)./$(BENCH) --out bench/results
	$(Q)if $(PYTHON) -c "import torch" 2>/dev/null; then \
		DASH_LIBRARY=$(abspath $(LIBDASH_SO)) $(PYTHON) bench/py_layers.py \
			> bench/results/py-layers-make-bench-$$(date -u +%F).md; \
	else echo "bench: $(PYTHON) has no torch (make venv): the Python layers' timing skipped"; fi
	$(Q)./$(BENCH_VARLEN) --out bench/results
	$(Q)./$(BENCH_DAEMON) --out bench/results
	$(Q)./$(BENCH_PING) --out bench/results
	$(Q)./$(BENCH_SOAK) --out bench/results
	$(Q)./$(BENCH_CHURN) --seconds 60 --out bench/results
	$(Q)./$(BENCH_FAIR) --seconds 10 --out bench/results
	$(Q)if [ -n "$(BENCH_GPU)" ] && nvidia-smi -L >/dev/null 2>&1; then \
		d=$$(date -u +%F); c=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown); \
		o=$$(mktemp -d); OUT=$$o BIN=$(BUILD) bash scripts/gpu_bench.sh $$c && \
		cp $$o/gpu-report.md bench/results/gpu-make-bench-$$d.md && \
		for s in 4096 16384; do for a in "" "--audit $$(mktemp -u)"; do \
			./$(BUILD)/bench_gpu_daemon --reps 10 --seqlen $$s $$a; done; done \
			> bench/results/gpu-daemon-make-bench-$$d.md && \
		./$(BUILD)/bench_gpu_handoff >> bench/results/gpu-daemon-make-bench-$$d.md && \
		for s in 1024 4096; do ./$(BUILD)/bench_audit --seqlen $$s; done \
			> bench/results/gpu-audit-make-bench-$$d.md && \
		o2=$$(mktemp -d) && DASHD_BIN=$(abspath $(DASHD)) DASH_LIBRARY=$(abspath $(LIBDASH_SO)) \
			OUT=$$o2 bash scripts/gpu_percall.sh 20 > /dev/null && \
		cat $$o2/percall-*.md $$o2/steps.md > bench/results/gpu-percall-make-bench-$$d.md && \
		echo "bench: GPU results in bench/results/gpu-make-bench-$$d.md, gpu-daemon-make-bench-$$d.md, gpu-audit-make-bench-$$d.md and gpu-percall-make-bench-$$d.md"; \
	else echo "bench: no GPU here (or no CUDA build): GPU benchmarks skipped"; fi

# The CPU suites with ASan+UBSan: dashd, dashctl and the suites rebuilt into build-asan/
# with both sanitizers, every report fatal (a daemon that reports exits unclean, which the
# suites check). CI runs it; the Python binding's tests are not part of it (the
# interpreter would need libasan preloaded).
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
asan: deps
	$(Q)$(MAKE) --no-print-directory CUDA=0 BUILD=build-asan OPT=-O1 FUZZ_CC= \
		EXTRA_CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
		LDLIBS="-lm -pthread -fsanitize=address,undefined" \
		build-asan/test_dash build-asan/dashd build-asan/dashctl \
		$(subst $(BUILD)/,build-asan/,$(MANPAGES))
	$(Q)$(SAN_ENV) ./build-asan/test_dash

# The daemon's concurrency under ThreadSanitizer: dashd (loop, worker, completer and
# metrics threads) built with TSan into build-tsan/ (the kernels left uninstrumented: TSan
# slows the engine's inner loops past the suites' timeouts; the engine's pool synchronises
# with pthread calls, which TSan still sees), driven by the suites that exercise it
# (built without TSan, into build-tsan/driver/ and copied next to it: they fork clients,
# which TSan does not support in a threaded process). A report makes dashd exit 66, which
# the suites see as an unclean exit.
TSAN_SUITES ?= dashd server libdash metrics soak
tsan: deps
	$(Q)$(MAKE) --no-print-directory CUDA=0 BUILD=build-tsan OPT=-O2 FUZZ_CC= \
		EXTRA_CFLAGS="-fsanitize=thread -fno-omit-frame-pointer" KERNELS_EXTRA_CFLAGS= \
		LDLIBS="-lm -pthread -fsanitize=thread" build-tsan/dashd \
		$(subst $(BUILD)/,build-tsan/,$(MANPAGES))
	$(Q)$(MAKE) --no-print-directory CUDA=0 BUILD=build-tsan/driver FUZZ_CC= \
		build-tsan/driver/test_dash build-tsan/driver/dashctl
	$(Q)cp build-tsan/driver/test_dash build-tsan/driver/dashctl build-tsan/
	$(Q)DASH_TEST_SANITIZED_DASHD=tsan \
		TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$(abspath tests/tsan.supp)" \
		./build-tsan/test_dash $(TSAN_SUITES)

fuzz: deps $(FUZZ_SEEDS) $(FUZZ)
ifeq ($(FUZZ),)
	@echo "fuzz: clang not found (scripts/deps.sh installs it)"; exit 1
else
	$(Q)$(call fuzz_run,$(FUZZ_SECONDS))
endif

demo: deps all
	$(Q)bash scripts/demo.sh $(BUILD)

# The units name $(BINDIR)/dashd; the example config comes with the config file format
# (systemd/dashd.conf.example) where this tree has it.
UNITS := systemd/dashd.service systemd/dashd@.service systemd/dashd-mps.service
CONF_EXAMPLE := $(wildcard systemd/dashd.conf.example)
install: $(DASHD) $(DASHCTL) $(LIBDASH_SO) $(LIBDASH_A) $(MANPAGES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(DATADIR)/dashd/proto $(DESTDIR)$(DATADIR)/dashd/systemd \
		$(DESTDIR)$(DATADIR)/doc/dashd $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
		$(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
		$(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(DASHD) $(DASHCTL) $(DESTDIR)$(BINDIR)/
	install -m 0755 $(LIBDASH_SO) $(DESTDIR)$(LIBDIR)/libdash.so.$(VERSION)
	ln -sf libdash.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdash.so.$(SOVERSION)
	ln -sf libdash.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libdash.so
	install -m 0644 $(LIBDASH_A) $(DESTDIR)$(LIBDIR)/libdash.a
	install -m 0644 client/dash.h $(DESTDIR)$(INCLUDEDIR)/dash.h
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' client/dash.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/dash.pc
	install -m 0644 proto/dash.proto proto/audit.proto $(DESTDIR)$(DATADIR)/dashd/proto/
	for u in $(UNITS); do sed -e 's|/usr/local/bin/|$(BINDIR)/|g' \
		-e 's|/usr/local/share/|$(DATADIR)/|g' $$u > $(DESTDIR)$(SYSTEMDUNITDIR)/$${u#systemd/}; done
	install -m 0644 systemd/dashd-mps.conf $(DESTDIR)$(DATADIR)/dashd/systemd/dashd-mps.conf
	install -m 0644 systemd/dashd.sysusers $(DESTDIR)$(SYSUSERSDIR)/dashd.conf
	install -m 0644 systemd/dashd.tmpfiles $(DESTDIR)$(TMPFILESDIR)/dashd.conf
	$(if $(CONF_EXAMPLE),install -m 0644 $(CONF_EXAMPLE) $(DESTDIR)$(DATADIR)/dashd/dashd.conf.example)
	install -m 0644 $(BUILD)/man/man1/dashctl.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(BUILD)/man/man3/libdash.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 0644 $(BUILD)/man/man8/dashd.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DATADIR)/doc/dashd/

# A staged install (DESTDIR) that a C program builds against with pkg-config alone and
# runs against the installed dashd; the installed units pass `systemd-analyze verify` and
# score below 5.0 in `systemd-analyze security` where systemd-analyze exists.
test-install: $(DASHD) $(DASHCTL) $(LIBDASH_SO) $(LIBDASH_A) $(MANPAGES) $(DEMO_CLIENT) $(UNIT_SECCOMP)
	$(Q)bash tests/install_test.sh "$(MAKE)" "$(BUILD)"

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj $(BUILD)/fuzz -name '*.d' 2>/dev/null)
