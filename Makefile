# dashd - the one entry point of the build. Everything built lands in build/.
#
#   make            libraries, dashctl, tests, examples (CUDA parts when nvcc is found)
#   make test       CPU test suites (CUnit); the summary is the last thing printed
#   make test-gpu   GPU test suites; they skip, saying so, where no GPU is usable
#   make bench      CPU engine benchmark, recorded under bench/results/
#   make demo       a forward + backward on random data, checked bit for bit
#   make install    PREFIX=/usr/local DESTDIR=
#   make clean
#
# Knobs: OPT (optimisation flags; -O3 because gcc 12 vectorises the engine's inner loops
# only there - they sum nothing out of order, so the bits do not depend on it beyond the
# build id), CUDA=0 (skip CUDA parts), V=1 (show commands).

OPT ?= -O3
V ?= 0
CUDA ?= auto
PREFIX ?= /usr/local
BUILD := build

CC ?= cc
ifeq ($(origin CC),default)
CC := gcc
endif
CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(OPT) -pthread -MMD -MP $(EXTRA_CFLAGS)
LDLIBS := -lm -pthread

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
NVCCFLAGS := -std=c++17 -O2 -g -Xcompiler -Wall,-Wextra,-Werror \
	-gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
endif

# ---- sources ------------------------------------------------------------------------------
KERNELS_SRC := kernels/sched.c kernels/dag.c kernels/dtype.c kernels/pool.c \
	kernels/engine.c kernels/engine_bwd.c kernels/ref.c
PROTO_SRC := proto/errors.c
DASHCTL_SRC := client/dashctl.c client/ctl_sched.c
TEST_SRC := tests/run_tests.c tests/testutil.c tests/test_errors.c tests/test_sched.c \
	tests/test_dag.c tests/test_dtype.c tests/test_engine.c tests/test_dashctl.c
BENCH_SRC := bench/bench_engine.c
DEMO_SRC := examples/engine_demo.c
GPU_TEST_CU := tests/gpu/test_sched_device.cu
GPU_TEST_SRC := tests/gpu/run_gpu_tests.c

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBKERNELS := $(BUILD)/libdashkernels.a
LIBPROTO := $(BUILD)/libdashproto.a
DASHCTL := $(BUILD)/dashctl
TESTS := $(BUILD)/test_dash
BENCH := $(BUILD)/bench_engine
DEMO := $(BUILD)/engine_demo
GPU_TESTS := $(if $(NVCC),$(BUILD)/test_dash_gpu)

ALL := $(LIBKERNELS) $(LIBPROTO) $(DASHCTL) $(TESTS) $(BENCH) $(DEMO) $(GPU_TESTS)

.PHONY: all deps test test-gpu bench demo install clean help
all: deps $(ALL)

help:
	@sed -n '2,12p' Makefile

# Installs missing Debian packages when run as root, else prints the apt-get line.
deps:
	$(Q)bash scripts/deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(V)),,echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(filter 1,$(V)),,echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIBKERNELS): $(call obj,$(KERNELS_SRC))
	@$(if $(filter 1,$(V)),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIBPROTO): $(call obj,$(PROTO_SRC))
	@$(if $(filter 1,$(V)),,echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(DASHCTL): $(call obj,$(DASHCTL_SRC)) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(TESTS): $(call obj,$(TEST_SRC)) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcunit $(LDLIBS)

$(BENCH): $(call obj,$(BENCH_SRC)) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(DEMO): $(call obj,$(DEMO_SRC)) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test_dash_gpu: $(BUILD)/obj/$(GPU_TEST_CU).o $(call obj,$(GPU_TEST_SRC)) $(LIBKERNELS) $(LIBPROTO)
	@$(if $(filter 1,$(V)),,echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcunit $(CUDA_LIBS) -lstdc++ $(LDLIBS)

# Builds everything first, so the CUDA sources are compiled (where nvcc is) even though the
# CPU suites do not run them. The test runner finds dashctl next to itself (build/).
test: deps all
	$(Q)./$(TESTS)

test-gpu: deps $(GPU_TESTS)
ifeq ($(NVCC),)
	@echo "test-gpu: skipped: nvcc not found (or CUDA=0), so no GPU tests were built"
else
	$(Q)./$(BUILD)/test_dash_gpu
endif

bench: deps $(BENCH)
	@mkdir -p bench/results
	$(Q)./$(BENCH) --out bench/results

demo: deps $(DEMO)
	$(Q)./$(DEMO)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(DASHCTL) $(DESTDIR)$(PREFIX)/bin/dashctl

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
